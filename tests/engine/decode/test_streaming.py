"""The streaming-session declaration on decode families: checked when a strategy class is
defined; the built-in families declare theirs."""

import pytest

from oasr.engine.decode.base import DecodeStrategy
from oasr.engine.decode.ctc_streaming import CtcStreamingSession
from oasr.engine.decode.ctc_wfst_streaming import CtcWfstStreamingSession
from oasr.engine.decode.registry import DECODE_STRATEGIES
from oasr.engine.decode.streaming import StreamingSession
from oasr.engine.decode.transducer_streaming import TransducerStreamingSession


def test_a_declaration_that_is_not_a_session_fails_at_class_definition():
    with pytest.raises(TypeError, match="Bad.streaming_session must be a StreamingSession"):
        class Bad(DecodeStrategy):
            streaming_session = object

    class Nameless(StreamingSession):
        def new_search(self): ...

        def feed(self, searches, out, out_lens, languages): ...

    with pytest.raises(TypeError, match="declares no name"):
        class AlsoBad(DecodeStrategy):
            streaming_session = Nameless


def test_builtin_families_declare_their_sessions():
    declared = {n: DECODE_STRATEGIES.get(n).streaming_session for n in DECODE_STRATEGIES.names()}
    assert declared["ctc"] is CtcStreamingSession
    assert declared["transducer"] is TransducerStreamingSession
    # a subclass of ctc whose rescoring reads a whole utterance says so
    assert declared["ctc_aed_rescoring"] is None
    assert declared["ctc_wfst"] is CtcWfstStreamingSession
    assert {n for n, s in declared.items() if s is not None} == {"ctc", "ctc_wfst", "transducer"}
