"""A real SillyTavern (the pinned npm package, installed by scripts/setup.sh) on a free
port with its own data root, the extension from clients/sillytavern installed into it
the way the README says, and a character with a long chat in ST's own formats."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path

import httpx

from devkit.runner import ROOT, stop_process

VERSION = "1.19.0"
EXTENSION_DIR = "multillm-paging"


def install_dir() -> Path:
    """Where setup.sh installed SillyTavern (SILLYTAVERN_DIR, default .cache/sillytavern)."""
    base = Path(os.environ.get("SILLYTAVERN_DIR", ROOT / ".cache" / "sillytavern"))
    return base / "node_modules" / "sillytavern"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ fixtures

def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def character_png(card: dict) -> bytes:
    """A 1x1 PNG carrying the card as ST reads it (tEXt 'chara' = base64 JSON)."""
    raw = b"\x00\x80\x60\xa0"                                      # one RGB pixel
    return (b"\x89PNG\r\n\x1a\n"
            + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + _png_chunk(b"tEXt", b"chara\x00" + base64.b64encode(json.dumps(card).encode()))
            + _png_chunk(b"IDAT", zlib.compress(raw))
            + _png_chunk(b"IEND", b""))


def turn(who: str, i: int, size: int = 300) -> str:
    """A unique, traceable message with Unicode (ST strips carriage returns itself)."""
    head = f"{who}-{i:04d} «Aurore» ночной лес · νύχτα · ma\u0301gico\t "
    return head + ("The lantern flickers by the river. " * (size // 35 + 1))[: size - len(head)]


def seed_character(user_dir: Path, name: str, chats: dict[str, int],
                   moments: dict[str, dict[int, tuple[str, str]]] | None = None) -> None:
    """A character and its chats, each pre-filled with `n` exchanges (ST's jsonl);
    `moments[chat][i]` replaces exchange i's (user, character) texts."""
    first = next(iter(chats))
    fields = {"name": name, "description": f"{name} is a ranger of the night forest.",
              "personality": "calm", "scenario": "A long journey.", "first_mes": turn("greet", 0),
              "mes_example": ""}
    card = {**fields, "spec": "chara_card_v2", "spec_version": "2.0", "chat": first,
            "create_date": "2026-01-01T00:00:00.000Z", "data": {**fields, "extensions": {}}}
    (user_dir / "characters").mkdir(parents=True, exist_ok=True)
    (user_dir / "characters" / f"{name}.png").write_bytes(character_png(card))
    folder = user_dir / "chats" / name
    folder.mkdir(parents=True, exist_ok=True)
    for chat_name, n in chats.items():
        lines = [{"user_name": "User", "character_name": name, "create_date": "2026-01-01@00h00m00s",
                  "chat_metadata": {}},
                 {"name": name, "is_user": False, "is_system": False, "send_date": "2026-01-01 00:00",
                  "mes": turn("greet", 0), "extra": {}}]
        special = (moments or {}).get(chat_name, {})
        for i in range(n):
            for k, (who, is_user) in enumerate((("User", True), (name, False))):
                text = special[i][k] if i in special else turn("u" if is_user else "a", i)
                lines.append({"name": who, "is_user": is_user, "is_system": False,
                              "send_date": "2026-01-01 00:00", "mes": text, "extra": {}})
        (folder / f"{chat_name}.jsonl").write_text(
            "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), encoding="utf-8")


# -------------------------------------------------------------------- server

class SillyTavern:
    """`node server.js` from the installed package, with a fresh data root."""

    def __init__(self, root: Path, setup_user, start_timeout: float = 240):
        self.dir = install_dir()
        if not (self.dir / "server.js").is_file():
            raise RuntimeError(f"SillyTavern is not installed at {self.dir}: run npm run setup:browser")
        self.data = root / "data"
        user = self.data / "default-user"
        # Installing the extension: copy the folder into the user's extensions.
        shutil.copytree(ROOT / "clients" / "sillytavern", user / "extensions" / EXTENSION_DIR)
        setup_user(user)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.lines: list[str] = []
        self.log = (root / "sillytavern.log").open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            ["node", "server.js", "--configPath", str(root / "config.yaml"), "--dataRoot", str(self.data),
             "--port", str(self.port), "--listen", "false", "--browserLaunchEnabled", "false",
             "--corsProxy", "true"],
            cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "NODE_ENV": "production"})
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + start_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("SillyTavern exited:\n" + "\n".join(self.lines[-30:]))
            try:
                if httpx.get(self.url + "/", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("SillyTavern did not start:\n" + "\n".join(self.lines[-30:]))
            time.sleep(0.25)

    def _pump(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.lines.append(line)
            self.log.write(line + "\n")
            self.log.flush()

    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self):
        stop_process(self.proc)
        self.log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
