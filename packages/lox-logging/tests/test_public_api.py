"""The exported names of lox are public API: this pins them."""

import lox

EXPECTED = {
    "ConsoleLogger",
    "DamagedSaveError",
    "HostLogger",
    "LogStructureError",
    "Logger",
    "LoggerState",
    "MultiLogger",
    "SaveLogger",
    "TensorBoardLogger",
    "WandbLogger",
    "keep",
    "load",
    "log",
    "logdict",
    "lox_p",
    "save",
    "spool",
    "strip",
    "tap",
    "to_csv",
}


def test_public_names_are_pinned():
    public = {n for n in dir(lox) if not n.startswith("_")}
    assert public == EXPECTED
