import numpy as np
import pytest

from gpt_models import ByteTokenizer


def test_round_trips_any_utf8():
    tok = ByteTokenizer()
    text = "ascii, é, 漢字, emoji 🎉, \x00 and newlines\n"
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ids.max() < 256
    assert tok.decode(ids) == text


def test_invalid_utf8_decodes_leniently():
    assert ByteTokenizer().decode([0xE6, 0x41]) == "\ufffdA"


def test_out_of_range_id_is_a_clear_error():
    with pytest.raises(ValueError, match=r"got token id 300, expected ids in 0\.\.255"):
        ByteTokenizer().decode([1, 300])
