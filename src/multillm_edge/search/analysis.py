"""Text -> words and terms, the same for pages and queries (docs/design.md §6.1):
``fold`` (NFKC + casefold), ``words``/``word_bag``/``line_bags`` (WORD_RE's words, cut
in C), ``cjk_terms`` (bigrams), ``query_terms`` (stop words left out, stemmed)."""

from __future__ import annotations

import re
import unicodedata
from collections import _count_elements   # Counter's counting loop (C in CPython, Pyodide)
from typing import NamedTuple

from sys import getsizeof

from .state import SLOT, STATE, Memo

# Hangul Jamo, CJK punctuation-free symbols 々〆, Hiragana, Katakana (+ prolonged mark),
# Hangul compatibility Jamo, CJK Ext A, Unified Ideographs, Hangul syllables,
# compatibility ideographs, Ext B and beyond.
CJK = ("\u1100-\u11ff\u3005\u3006\u3041-\u309f\u30a0-\u30ff\u3130-\u318f"
       "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f")
NUMBER = r"\d+(?:[.,:]\d+)+"        # one word with its inner separators: 1,200 3.5 10:30
WORD_CHAR = f"[^\\W_{CJK}]"         # what a word is made of
WORD_RE = re.compile(rf"{NUMBER}|{WORD_CHAR}+")
NUMBER_RE = re.compile(NUMBER)
CJK_RE = re.compile(f"[{CJK}]+")
DIGIT_RE = re.compile(r"\d")

# Characters NFKC leaves as they are and that never compose with a neighbour (checked
# character by character in the tests); runs of anything else, with the character
# before them, are normalized alone (NFKC of a whole page costs ~40 ms per MB).
_UNSTABLE_RE = re.compile(
    ".?[^\\x00-\\x7f\u00ab\u00bb\u00c0-\u00ff\u0100-\u0131\u0134-\u013e\u0141-\u0148"
    "\u014a-\u017e\u0400-\u0482\u048a-\u04ff\u2013\u2014\u2018\u2019\u201c\u201d\u2022"
    "\u3001-\u3003\u3008-\u3011\u3014-\u301f\u3041-\u3096\u30a1-\u30fd"
    "\u4e00-\u9fff\uac00-\ud7a3]+", re.S)
_UNSTABLE_CHAR_RE = re.compile(_UNSTABLE_RE.pattern[2:-1])
SIMPLE_CHARS = 4096      # characters whose NFKC ``_simple`` keeps (then emptied),
SIMPLE_BYTES = 1 << 20   # in at most this many bytes
_simple = STATE.part("simple characters", lambda: Memo(SIMPLE_CHARS, SIMPLE_BYTES))


def _nfkc_run(m) -> str:
    return unicodedata.normalize("NFKC", m.group())


def _simple_mapping(c: str):
    """NFKC of ``c`` when it can be replaced alone wherever it stands (fullwidth and
    general punctuation, Latin-1 symbols, ligatures: no combining mark); else None."""
    r = _simple.get(c, "")
    if r == "":
        o = ord(c)
        ok = (0xff01 <= o <= 0xff5e or 0x2000 <= o <= 0x206f or o == 0x3000 or 0xa0 <= o <= 0xbf
              or 0xfb00 <= o <= 0xfb06)
        r = unicodedata.normalize("NFKC", c) if ok else None
        if r is not None and any(unicodedata.combining(x) for x in r):
            r = None
        _simple.keep(c, r)
    return r


def fold(text: str) -> str:
    """``unicodedata.normalize("NFKC", text).casefold()`` (tested), cheaper: simple
    characters replaced in C, anything else normalized run by run."""
    return fold_utf8(text)[0]


def fold_utf8(text: str) -> tuple:
    """(``fold(text)``, its UTF-8 bytes, their non-ASCII bytes) — the bytes None where
    not made. ASCII text is NFKC's already and casefolds as it lowers; so does a text
    whose non-ASCII characters are all NFKC-stable, never compose and casefold to
    themselves (``_plain``): its UTF-8 bytes lowered, in C
    (issue 45: ``is_normalized`` and ``casefold`` per character were a new isolate's
    first recall's largest C step in Pyodide)."""
    if text.isascii():
        return text.lower(), None, None
    raw = text.encode("utf-8", "surrogatepass")
    others = raw.translate(None, _ASCII_BYTES)
    if _plain(others):
        raw = raw.lower()
        return raw.decode("utf-8", "surrogatepass"), raw, others
    if not unicodedata.is_normalized("NFKC", text):
        chars = set(_UNSTABLE_CHAR_RE.findall(text))
        maps = [(c, _simple_mapping(c)) for c in chars]
        if all(r is not None for _, r in maps):
            for c, r in maps:
                text = text.replace(c, r)
        else:
            text = _UNSTABLE_RE.sub(_nfkc_run, text)
    return text.casefold(), None, None


def _plain(others: bytes) -> bool:
    """Whether the characters of these non-ASCII UTF-8 bytes are all NFKC-stable, never
    compose with a neighbour (``_UNSTABLE_RE``'s complement, or simple characters NFKC
    maps to themselves), and casefold to themselves (kept per byte string, in the
    cuts' memo under a key no UTF-8 holds, 0xff before them: a chat's texts hold the
    same few, text after text)."""
    if len(others) > CUT_KEY_BYTES:
        return False
    key = b"\xff" + others
    got = _CUT_BYTES.get(key)
    if got is None:
        chars = "".join(set(others.decode("utf-8", "surrogatepass")))
        got = chars.casefold() == chars and all(      # a simple character NFKC keeps: ¡ « ©
            _simple_mapping(c) == c for c in "".join(_UNSTABLE_CHAR_RE.findall(chars)))
        _CUT_BYTES.keep(key, got)
    return got


def words(folded: str) -> list:
    """The words (non-CJK terms before stemming) of folded text."""
    return WORD_RE.findall(folded)


# ASCII bytes that are not letters or digits -> space; the rest (and every byte of a
# non-ASCII character's UTF-8) as they are
_ASCII_SPACE = bytes(c if (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c > 127) else 32
                     for c in range(256))
_ASCII_SPACE_LINES = _ASCII_SPACE[:10] + b"\n" + _ASCII_SPACE[11:]     # newlines kept
_ASCII_BYTES = bytes(range(128))
# ASCII digits -> "0", the separators of WORD_RE's numbers (".,:") -> ".", the rest -> " "
_NUMBER_SHAPE = bytes(48 if 48 <= c <= 57 else 46 if c in b".,:" else 32 for c in range(256))
_WORD_CHAR_RE = re.compile(WORD_CHAR)
WORD, CUT, DIGIT = 0, 1, 2     # what a non-ASCII character is to WORD_RE
CUT_CHARACTERS = 24      # distinct non-ASCII non-word characters past which WORD_RE cuts
CUT_SETS = 1024          # sets of a text's non-ASCII characters ``_cuts`` keeps (then emptied),
CUT_SET_SIZE = 128       # each of at most this many characters;
CUT_KEY_BYTES = 256      # and byte strings of at most this many bytes;
CUTS_BYTES = 1 << 20     # each memo in at most this many bytes
#: A non-Latin-1 character's own string (CPython makes one per character it yields).
_CHAR = getsizeof("\u0391")


def _cut_set_size(key: frozenset, value) -> int:
    """A set of characters and its cuts: the set, each character's string, the tuple."""
    return getsizeof(key) + _CHAR * len(key) + getsizeof(value) + SLOT


_CUTS = STATE.part("cuts by characters", lambda: Memo(CUT_SETS, CUTS_BYTES, _cut_set_size))
_CUT_BYTES = STATE.part("cuts by bytes", lambda: Memo(CUT_SETS, CUTS_BYTES))


#: Of a text's non-ASCII characters, those that may cut a word or make a number: not
#: word characters, CJK, decimal digits. The others are word characters (``_kind``'s
#: WORD, or a digit ``\d`` does not match, like ², which no number holds).
_MAY_CUT_RE = re.compile(f"[\\W\\d{CJK}]")
#: The first bytes of UTF-8's characters from U+3000 on (CJK, kana, Hangul, fullwidth, emoji)
_FROM_U3000 = bytes(range(0xe3, 0x100))


def _kind(c: str) -> int:
    return DIGIT if c.isdigit() else WORD if _WORD_CHAR_RE.match(c) else CUT


def _cuts(others: frozenset):
    """The non-word characters among a text's non-ASCII ``others``, or None when
    WORD_RE must cut it (many of them: CJK text; a digit like ٣: its numbers)."""
    got = _CUTS.get(others, _CUTS)
    if got is _CUTS:
        cuts = []
        for c in others:        # stops at a digit or past CUT_CHARACTERS cuts (CJK text)
            kind = _kind(c)
            if kind == DIGIT or kind == CUT and len(cuts) == CUT_CHARACTERS:
                cuts = None
                break
            if kind == CUT:
                cuts.append(c)
        got = None if cuts is None else tuple(sorted(cuts))
        if len(others) <= CUT_SET_SIZE:
            _CUTS.keep(others, got)
    return got


def word_bag(folded: str, raw: bytes | None = None, others: bytes | None = None) -> list:
    """``words(folded)`` in another order, several times cheaper: non-word characters
    made spaces (ASCII by a bytes translation, the few others a text holds replaced),
    then a split; ``words`` itself where a number like ``3.5`` is. ``raw``, ``others``:
    its UTF-8 bytes and their non-ASCII ones, when ``fold_utf8`` made them."""
    spaced = _spaced(folded, _ASCII_SPACE, raw, others)
    return WORD_RE.findall(folded) if spaced is None else spaced.split()


def counts(words) -> dict:
    """``dict(Counter(words))``, counted by Counter's C loop without its constructor."""
    out: dict = {}
    _count_elements(out, words)
    return out


def line_bags(folded: str) -> list:
    """``[word_bag(line) for line in folded.split("\\n")]``, cut in one pass."""
    spaced = _spaced(folded, _ASCII_SPACE_LINES)
    if spaced is None:
        return [WORD_RE.findall(line) for line in folded.split("\n")]
    return [line.split() for line in spaced.split("\n")]


def _spaced(folded: str, table: bytes, raw: bytes | None = None, others: bytes | None = None) -> str | None:
    """``folded`` with every non-word character a space (``table``: the ASCII ones), or
    None where that does not cut it as WORD_RE does (``raw``, ``others``: as
    ``word_bag``'s)."""
    if raw is None:
        raw, others = folded.encode("utf-8", "surrogatepass"), None
    if b"0.0" in raw.translate(_NUMBER_SHAPE):      # a digit, [.,:], a digit
        return None
    spaced = raw.translate(table).decode("utf-8", "surrogatepass")
    if len(raw) == len(folded):       # ASCII
        return spaced
    if others is None:
        others = raw.translate(None, _ASCII_BYTES)
    if len(others) > CUT_KEY_BYTES:
        # many: a Cyrillic, Greek, … text's, most of it (a set of every character, a
        # string each, was ~3x the cost of the rest of its cutting in Pyodide), those
        # that may cut a word found in C; a CJK text's (most from U+3000 on, 3-4 bytes
        # each, nearly all cutting) in one set, ~2x cheaper there
        chars = others.decode("utf-8", "surrogatepass")
        cjk = 6 * (len(others) - len(others.translate(None, _FROM_U3000))) > len(others)
        cuts = _cuts(frozenset(chars if cjk else _MAY_CUT_RE.findall(chars)))
    else:
        cuts = _CUT_BYTES.get(others, _CUT_BYTES)     # the same few bytes, text after text
        if cuts is _CUT_BYTES:
            cuts = _cuts(frozenset(others.decode("utf-8", "surrogatepass")))
            _CUT_BYTES.keep(others, cuts)
    if cuts is None:
        return None
    for c in cuts:
        spaced = spaced.replace(c, " ")
    return spaced


def cjk_terms(folded: str) -> list:
    """Character bigrams of each CJK run (a lone character as itself), in order."""
    out = []
    for run in CJK_RE.findall(folded):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i:i + 2] for i in range(len(run) - 1))
    return out


# Stop words: function words a question is worded with (English, Russian), in the spirit
# of the NLTK/Snowball lists; left out of every query.
STOPWORDS = frozenset("""a an the and or but of to in on at by for with from into about as is are
was were be been being am do does did done have has had i you he she it we they me him her us them
my your his its our their this that these those what which who whom whose when where why how
there here then so not no if can could would should will shall may might must s t re ll ve d
и в во не что он на я с со как а то все она так его но да ты к у же вы за бы по ее мне было вот от
меня еще нет о из ему теперь когда даже ну ли если уже или ни быть был него до вас нибудь опять
уж вам ведь там потом себя ничего ей может они тут где есть надо ней для мы тебя их чем была сам
чтоб без будто чего раз тоже себе под будет ж тогда кто этот того потому этого какой совсем ним
здесь этом один почти мой тем чтобы нее были куда зачем всех никогда можно при наконец два об
другой хоть после над больше тот через эти нас про всего них какая много разве три эту моя
впрочем хорошо свою этой перед иногда лучше чуть том нельзя такой им более всегда конечно всю
между""".split())


class Term(NamedTuple):
    kind: str            # "w" word stem, "c" CJK bigram (or lone character)
    value: str           # the stem or the CJK term
    surfaces: frozenset  # the query's folded words with this stem ("w" only)


def query_terms(query: str, stem) -> list:
    """The query's distinct terms in first-seen order (``stem``: word -> stem). Stop
    words are left out, lone letters too when longer words remain."""
    folded = fold(query)
    ws = [w for w in words(folded) if w not in STOPWORDS]
    longer = [w for w in ws if len(w) > 1 or w.isdigit()]
    by_stem: dict = {}
    for w in longer or ws:
        by_stem.setdefault(stem(w), set()).add(w)
    out = [Term("w", s, frozenset(v)) for s, v in by_stem.items()]
    seen = set()
    for b in cjk_terms(folded):
        if b not in seen:
            seen.add(b)
            out.append(Term("c", b, frozenset()))
    return out
