"""Issue 31: one bounded-regular-file check and one atomic write (fedsciml.runtime.files), used by predict's
--points/--out, the model files and the checkpoints."""
import os

import pytest

from fedsciml.runtime import checkpoint, files, modelio


@pytest.mark.parametrize("make, why", [
    (lambda p: os.mkfifo(p), "is not a regular file (a directory, FIFO or device); a CSV is a file"),
    (lambda p: os.symlink("/dev/zero", p), "is not a regular file"),
    (lambda p: os.mkdir(p), "is not a regular file"),
    (lambda p: open(p, "wb").write(b"x" * 11), "holds 11 bytes, more than the 10 a CSV may hold"),
    (lambda p: None, "cannot be read (No such file or directory)"),
])
def test_regular_file_size_refuses_in_one_line_naming_the_path(tmp_path, make, why):
    p = str(tmp_path / "f")
    make(p)
    with pytest.raises(files.FileRefused) as e:
        files.regular_file_size(p, 10, "a CSV")
    assert str(e.value) == f"{p!r} {why}" or (str(e.value).startswith(f"{p!r} ") and why in str(e.value))
    # the model reader says the same, as its own error
    with pytest.raises(modelio.ModelFileError, match="^" + repr(p).replace(".", r"\.")):
        modelio._regular_file(p, "model.json", 10)


def test_write_atomic_replaces_the_file_whole_or_leaves_it_untouched(tmp_path):
    p = str(tmp_path / "out.csv")
    files.write_atomic(p, lambda f: f.write("a,b\n1,2\n"), newline="")
    assert open(p).read() == "a,b\n1,2\n" and not os.path.exists(p + ".tmp")

    def half(f):
        f.write("partial")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space left on device"):
        files.write_atomic(p, half)
    assert open(p).read() == "a,b\n1,2\n" and not os.path.exists(p + ".tmp")


def test_the_checkpoint_writer_and_predict_out_go_through_it(tmp_path, monkeypatch):
    calls = []
    real = files.write_outputs  # the one writer every output goes through (write_atomic, write_output included)
    monkeypatch.setattr(files, "write_outputs", lambda items, **k: (calls.extend(p for p, _ in items),
                                                                    real(items, **k)))
    state = {"fingerprint": {}, "round": 1, "rng": {}, "strategy": {}, "rows": [], "floats_up": 0, "floats_down": 0,
             "elapsed": 0.0, "rejections": []}
    final = checkpoint.save(str(tmp_path / "ck"), state)
    assert calls == [final] and checkpoint.read(final)["round"] == 1

    from fedsciml.cli import predict as cli

    cli._write_csv_atomic(str(tmp_path / "u.csv"), ["x", "u"], [[0.5, 1.0]])
    assert calls[-1] == str(tmp_path / "u.csv") and open(tmp_path / "u.csv", "rb").read() == b"x,u\r\n0.5,1.0\r\n"


def test_predict_points_over_the_bound_says_to_split_it(tmp_path, monkeypatch):
    # the CLI's --points reader keeps its hint through the shared check (found in review: it was lost in the move)
    from fedsciml.cli import predict as cli

    monkeypatch.setattr(cli, "MAX_POINTS_BYTES", 10)
    p = tmp_path / "points.csv"
    p.write_text("0.1,0.2\n0.3,0.4\n")
    with pytest.raises(cli.CLIError) as e:
        cli._read_points(str(p))
    assert str(e.value) == (f"--points {str(p)!r} holds 16 bytes, more than the 10 a CSV of points may hold; "
                            f"split it into several files")
