"""How a tool's text answer decodes (no Ray): plain text reads as ``str``; a model given text
that is not JSON fails naming the tool and showing how the text begins."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from actors import DecodingError, TextContent, ToolCallResult, decode_output

STATUS = "Repository status:\nOn branch main\nnothing to commit, working tree clean\n"


class Status(BaseModel):
    branch: str


def _answer(*texts: str) -> ToolCallResult:
    return ToolCallResult(content=[TextContent(text=text) for text in texts])


def test_plain_text_reads_as_str_as_it_came():
    assert decode_output("git.git_status", _answer(STATUS), str) == STATUS
    assert decode_output("git.git_branch", _answer("* main"), str) == "* main"


def test_the_text_blocks_of_an_answer_are_joined():
    assert decode_output("fs.read", _answer("line one\n", "line two\n"), str) == "line one\nline two\n"


def test_a_json_string_literal_reads_as_the_string_it_encodes():
    # What a typed skill returning str sends: the JSON of the string.
    assert decode_output("echo", _answer('"abc"'), str) == "abc"
    assert decode_output("echo", _answer(' "a \\"quoted\\" word"\n'), str) == 'a "quoted" word'


def test_text_that_is_json_of_another_kind_or_only_starts_like_a_string_stays_text():
    assert decode_output("calc", _answer("42"), str) == "42"
    assert decode_output("time.get_current_time", _answer('{\n  "timezone": "UTC"\n}'), str) == '{\n  "timezone": "UTC"\n}'
    assert decode_output("quote", _answer('"to be" or not'), str) == '"to be" or not'


def test_blank_or_null_reads_as_the_empty_string():
    assert decode_output("noop", _answer(""), str) == ""
    assert decode_output("noop", _answer("null"), str) == ""
    assert decode_output("noop", ToolCallResult(), str) == ""


def test_a_model_given_text_that_is_not_json_fails_naming_the_tool_and_showing_the_texts_start():
    with pytest.raises(DecodingError) as failure:
        decode_output("git.git_status", _answer(STATUS), Status)
    message = str(failure.value)
    assert failure.value.skill == "git.git_status"
    assert message.startswith("handoff 'git.git_status': decoding output as Status failed: the tool answered text "
                              "that is not JSON (a plain-text answer reads only as str); it begins ")
    assert repr(STATUS.strip()) in message


def test_a_long_text_shows_its_first_200_characters_and_its_length():
    text = "Commit history:\n" + "".join(f"Commit: {i:040x}\n" for i in range(40))
    with pytest.raises(DecodingError) as failure:
        decode_output("git.git_log", _answer(text), list[str])
    message = str(failure.value)
    assert "handoff 'git.git_log'" in message
    assert f"it begins {text[:200]!r}... ({len(text.strip())} characters)" in message
    assert text[200:240] not in message


def test_json_that_does_not_fit_the_model_still_says_what_does_not_fit():
    with pytest.raises(DecodingError, match=r"handoff 'add': decoding output as Status failed: 1 validation error(?s:.*)branch"):
        decode_output("add", _answer('{"sum": 3}'), Status)
