"""The batch verdicts as pure functions (docs/design.md §7.1): refused only when an
item provably declares the capability; anything the edge cannot read like the origin
is left to the origin."""

import json

import pytest

from devkit import batches as b
from multillm_edge.routes import batch
from multillm_edge.core.validation import MAX_DEPTH

CAP = [b.CAPABILITY]
CT = b.content_type()


def verdict(file: bytes, **kw):
    return batch.upload_refusal(b.form(file, **kw), CT)


def test_first_declaring_line_and_its_custom_id():
    file = b.jsonl([b.item(1), b.item(2, ["other"]), b.item(3, CAP), b.item(4, CAP)])
    assert verdict(file) == batch.Refusal(3, "req-3")


def test_nothing_declared_is_forwarded():
    assert verdict(b.jsonl([b.item(n, ["other"]) for n in range(1, 50)])) is None


@pytest.mark.parametrize("crlf", [b"\r\n", b"\n"])
def test_crlf_and_lf_forms_and_lines(crlf):
    file = b.jsonl([b.item(1), b.item(2, CAP)], newline=crlf)
    assert verdict(file, crlf=crlf) == batch.Refusal(2, "req-2")


def test_blank_lines_count_in_line_numbers_and_a_bom_is_skipped():
    file = b"\xef\xbb\xbf" + b.jsonl([b.item(1)]) + b"\n  \n" + b.jsonl([b.item(4, CAP)])
    assert verdict(file) == batch.Refusal(4, "req-4")


def test_escaped_name_still_declares():
    line = json.dumps(b.item(1, CAP)).replace("multillm_context", "multillm\\u005fcontext").encode()
    assert b.CAPABILITY.encode() not in line
    assert verdict(line + b"\n") == batch.Refusal(1, "req-1")


@pytest.mark.parametrize("caps", [
    b.CAPABILITY, [[b.CAPABILITY]], [{"name": b.CAPABILITY}], {"multillm_context_retrieve": True},
    ["Multillm_Context_Retrieve"], None])
def test_odd_shapes_do_not_declare(caps):
    it = b.item(1, caps)
    it["metadata"] = {"capabilities": CAP}            # not in `body`
    assert verdict(b.jsonl([it])) is None


def test_duplicated_key_is_read_as_the_origin_reads_it_last_wins():
    body = b'{"model":"m","capabilities":["multillm_context_retrieve"],"capabilities":[]}'
    assert verdict(b'{"custom_id":"a","body":' + body + b"}\n") is None
    body = b'{"capabilities":[],"capabilities":["multillm_context_retrieve"]}'
    assert verdict(b'{"custom_id":"a","body":' + body + b"}\n") == batch.Refusal(1, "a")


def test_non_string_custom_id_is_null():
    it = b.item(1, CAP)
    it["custom_id"] = 7
    assert verdict(b.jsonl([it])) == batch.Refusal(1, None)


@pytest.mark.parametrize("bad", [b"not json", b'{"a":', b"\xff\xfe", b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
                                 b'{"x":NaN}'])
def test_an_unreadable_line_leaves_the_whole_file_to_the_origin(bad):
    file = b.jsonl([b.item(1, CAP)]) + bad + b"\n"
    assert verdict(file) is None


def test_a_line_deep_far_beyond_the_guard_never_crashes():
    deep = b'{"custom_id":"x","body":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    assert verdict(deep + b"\n" + b.jsonl([b.item(2, CAP)])) is None


def test_over_the_origin_limits_is_left_to_it():
    many = b.jsonl([b.item(n) for n in range(1, batch.MAX_FILE_LINES + 1)])
    assert verdict(many + b.jsonl([b.item(0, CAP)])) is None
    assert verdict(b.jsonl([b.item(n) for n in range(1, batch.MAX_FILE_LINES)] + [b.item(0, CAP)])) \
        == batch.Refusal(batch.MAX_FILE_LINES, "req-0")
    line = b.jsonl([b.item(1, CAP)])
    pad = b" " * (batch.MAX_FILE_BYTES - len(line) + 1)
    assert verdict(line[:-1] + pad + b"\n") is None                  # 10 MiB + 1
    assert verdict(line[:-1] + pad[:-1] + b"\n") == batch.Refusal(1, "req-1")


@pytest.mark.parametrize("purpose", [b"fine-tune", b"batch ", b"Batch", b""])
def test_other_purposes_are_not_judged(purpose):
    assert verdict(b.jsonl([b.item(1, CAP)]), purpose=purpose) is None


def test_malformed_forms_are_not_judged():
    file = b.jsonl([b.item(1, CAP)])
    good = b.form(file)
    assert batch.upload_refusal(good, CT) is not None
    for ct in ["multipart/form-data", "multipart/form-data; boundary=", "application/json",
               "multipart/form-data; boundary=" + "x" * 71, "multipart/mixed; boundary=" + b.BOUNDARY]:
        assert batch.upload_refusal(good, ct) is None, ct
    assert batch.upload_refusal(good.rsplit(b"--", 2)[0], CT) is None          # never closed
    assert batch.upload_refusal(good.replace(b"\r\n\r\n", b"\r\n", 1), CT) is None
    assert batch.upload_refusal(good + good, CT) is not None                    # epilogue ignored
    no_filename = good.replace(b'; filename="batch.jsonl"', b"")
    assert batch.upload_refusal(no_filename, CT) is None


def test_quoted_boundary_and_extra_parts():
    q = 'multipart/form-data; charset=utf-8; boundary="a b:c"'
    assert batch.form_boundary(q) == b"a b:c"
    body = b.form(b.jsonl([b.item(1, CAP)]), boundary="a b:c")
    assert batch.upload_refusal(body, q) == batch.Refusal(1, "req-1")


def test_two_files_or_two_purposes_are_left_to_the_origin():
    one = b.form(b.jsonl([b.item(1, CAP)]))
    head, rest = one.split(b'Content-Disposition: form-data; name="file"', 1)
    twice = head + b'Content-Disposition: form-data; name="file"' + rest.replace(
        b"--" + b.BOUNDARY.encode() + b"--", b"--" + b.BOUNDARY.encode() + b"\r\n" +
        b'Content-Disposition: form-data; name="file"; filename="x"\r\n\r\nx\r\n--' + b.BOUNDARY.encode() + b"--")
    assert batch.upload_refusal(twice, CT) is None


def test_inline_batches():
    doc = b.inline([b.message_params(), b.message_params(CAP), b.message_params(CAP)])
    assert batch.inline_refusal(json.dumps(doc).encode()) == batch.Refusal(1, "msg-1")
    assert batch.inline_refusal(json.dumps(b.inline([b.message_params(["x"])])).encode()) is None
    for raw in [b"", b"null", b'{"requests":{}}', b"[" * 100_000, b'{"requests":[1,"x",null]}',
                b'{"requests":[{"params":{"capabilities":"multillm_context_retrieve"}}]}']:
        assert batch.inline_refusal(raw) is None


def test_thousands_of_parts_stay_linear():
    import time
    extra = b"".join(b"--" + b.BOUNDARY.encode() + b'\r\nContent-Disposition: form-data; name="x%d"\r\n\r\nv\r\n' % i
                     for i in range(5000))
    body = extra + b.form(b.jsonl([b.item(1, CAP)]))
    started = time.perf_counter()
    assert batch.upload_refusal(body, CT) == batch.Refusal(1, "req-1")
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("purpose, cut, settled", [
    (b"fine-tune", None, True),          # a complete purpose other than batch
    (b"batch", None, False),             # batch: the whole form is judged
    (b"fine-tune", 60, False),           # the purpose part not closed yet in the head
    (b"batch-ish", None, True),
])
def test_not_a_batch_upload_decides_from_complete_parts_only(purpose, cut, settled):
    body = b.form(b.jsonl([b.item(1, [batch.CAPABILITY])]), purpose=purpose)
    head = body if cut is None else body[:cut]
    assert batch.not_a_batch_upload(head, b.BOUNDARY.encode()) is settled
    if settled:   # never settles what the whole body would refuse
        assert batch.upload_refusal(body, b.content_type()) is None


def test_a_second_purpose_field_settles_it():
    one = b.form(b"", purpose=b"batch")
    two = one.replace(b"--" + b.BOUNDARY.encode() + b"\r\nContent-Disposition: form-data; name=\"file\"",
                      b"--" + b.BOUNDARY.encode() + b"\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
                      + b"--" + b.BOUNDARY.encode() + b"\r\nContent-Disposition: form-data; name=\"file\"", 1)
    assert batch.not_a_batch_upload(one, b.BOUNDARY.encode()) is False
    assert batch.not_a_batch_upload(two, b.BOUNDARY.encode()) is True
    assert batch.batch_file(two, b.content_type()) is None
