import pytest

from lnet.client.commands.demo import main


def test_the_demo_walks_an_allocation_through_its_life(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--block-size", "1MiB", "--expire", "1"]) == 0
    out = capsys.readouterr().out
    assert "after expiry it answers 404 not_found" in out
    assert "sunnyvale's copy is identical" in out
    assert "FAILED" not in out


def test_the_demo_refuses_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--block-size", "lots"])
    assert exit_.value.code == 2
    assert "not a size" in capsys.readouterr().err
