"""python -m flashjit.bench without a GPU: its command line and its plot from made-up cells (the
timing runs on the device)."""
import pytest

from flashjit import bench


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    for option in ("--dtype", "--pass", "--d", "--s", "--causal", "--group", "--backends", "--rounds", "--out",
                   "--json", "train"):
        assert option in text


def test_a_pass_counts_its_products_in_forwards():
    # 4 b h s^2 d: two products of 2 s^2 d FLOPs a head; the backward has five, a training step seven.
    assert bench.flops_of(2, 16, 1024, 128, False, "forward") == 4.0 * 2 * 16 * 1024 * 1024 * 128
    assert bench.flops_of(2, 16, 1024, 128, True, "forward") == bench.flops_of(2, 16, 1024, 128, False, "forward") / 2
    assert bench.flops_of(1, 1, 64, 64, False, "backward") == 2.5 * bench.flops_of(1, 1, 64, 64, False, "forward")
    assert bench.flops_of(1, 1, 64, 64, True, "train") == 3.5 * bench.flops_of(1, 1, 64, 64, True, "forward")
    with pytest.raises(KeyError):
        bench.flops_of(1, 1, 64, 64, False, "inference")


def test_a_group_that_does_not_divide_the_heads_is_refused_with_the_numbers(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--d", "128", "--width", "2048", "--group", "3"])  # 16 query heads
    assert e.value.code == 2
    assert "--group 3 must divide the 16 query heads of head dim 128 (--width 2048)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        bench.main(["--group", "0"])
    assert e.value.code == 2


def test_an_unknown_backend_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--backends", "flashjit,triton"])
    assert e.value.code == 2
    assert "--backends: unknown triton" in capsys.readouterr().err


def test_plot_writes_one_panel_per_head_dim(tmp_path):
    pytest.importorskip("matplotlib")
    cells = [{"head_dim": d, "seq": s, "causal": c, "tflops": {"flashjit": 300.0 + d, "sdpa-cudnn": 280.0}}
             for d in (64, 128) for s in (512, 4096) for c in (False, True)]
    path = tmp_path / "plot.png"
    bench.plot(cells, str(path), "made-up cells")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_every_dtype_choice_has_a_torch_type_and_an_agreement_bound(capsys):
    assert set(bench.DTYPES) == set(bench.AGREEMENT) == {"bf16", "fp16", "fp32"}
    assert bench.AGREEMENT["fp32"] < bench.AGREEMENT["bf16"]  # exact fp32 is held to far less than 16-bit
    with pytest.raises(SystemExit) as e:
        bench.main(["--dtype", "fp64"])
    assert e.value.code == 2
    assert "--dtype" in capsys.readouterr().err
