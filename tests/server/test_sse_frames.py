"""SSEWriter.write_content (the per-token hot path) writes the bytes of content_chunk_bytes,
inside a drain (gathered into one write per stream, choice 0's content into one chunk) and
outside one."""

from __future__ import annotations

from vllm_pyfrontend.serving import sse


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def write(self, data) -> None:
        self.writes.append(bytes(data))


def _framed(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def test_write_content_matches_content_chunk_bytes():
    w = sse.SSEWriter("chatcmpl-1", "m", 7)
    w.drain = drain = sse.StreamDrain()
    t = _Transport()
    w.attach(t, b"")
    texts = ["plain", 'quote " and \\ slash', "é ✓ 𝄞", "\n"]
    for index in (0, 3):
        before = len(t.writes)
        drain.begin()
        for text in texts:
            w.write_content(index, text)
        assert len(t.writes) == before  # held until the drain ends
        drain.end()
        if index == 0:
            # choice 0's content of one drain goes out as one chunk (the worker was behind)
            assert t.writes[-1] == _framed(w.content_chunk_bytes(0, "".join(texts)))
        else:
            assert t.writes[-1] == _framed(b"".join(w.content_chunk_bytes(index, x) for x in texts))
        w.write_content(index, "alone")
        assert t.writes[-1] == _framed(w.content_chunk_bytes(index, "alone"))


def test_content_gathered_in_a_drain_keeps_its_place_among_other_events():
    w = sse.SSEWriter("chatcmpl-3", "m", 7)
    w.drain = drain = sse.StreamDrain()
    t = _Transport()
    w.attach(t, b"")
    drain.begin()
    w.write_content(0, "a")
    w.write_content(0, "b")
    w.write_content(1, "x")  # another choice: framed at once, after choice 0's text so far
    w.write_content(0, "c")
    w.write(b"data: final\n\n")
    w.write_content(0, "d")
    drain.end()
    assert t.writes == [_framed(w.content_chunk_bytes(0, "ab") + w.content_chunk_bytes(1, "x")
                                + w.content_chunk_bytes(0, "c") + b"data: final\n\n"
                                + w.content_chunk_bytes(0, "d"))]
    # the end of a stream takes what is still gathered
    drain.begin()
    w.write_content(0, "e")
    assert w.last_frame() == w.content_chunk_bytes(0, "e") + sse.DONE
    drain.end()
    assert len(t.writes) == 1


def test_write_content_before_attach_is_held_in_order():
    w = sse.SSEWriter("chatcmpl-2", "m", 7)
    w.write_content(0, "a")
    w.write_content(0, "b")
    t = _Transport()
    w.attach(t, b"role")
    assert t.writes == [_framed(b"role"), _framed(w.content_chunk_bytes(0, "a")),
                        _framed(w.content_chunk_bytes(0, "b"))]


def test_arguments_chunk_is_the_general_tool_call_chunk():
    """The open call's argument chunk (the formatter's per-token path for tool calls) is the
    chunk the general path writes for the same delta, with and without continuous usage."""
    import msgspec

    w = sse.SSEWriter("chatcmpl-1", "m", 7)
    for index, call, text, usage in ((0, 0, '{"city": "Pa', None), (2, 1, 'é "\\ \n', {"prompt_tokens": 3})):
        item = {"index": call, "function": {"arguments": text}}
        general = w.prefix + b'{"index":%d,"delta":%b,"logprobs":null,"finish_reason":null,"token_ids":null}]' % (
            index, msgspec.json.encode({"tool_calls": [item]}))
        general += (b',"usage":' + msgspec.json.encode(usage) if usage else b"") + b"}\n\n"
        assert w.arguments_chunk_bytes(index, call, text, usage) == general
