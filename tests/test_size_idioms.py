"""AMP201 on the ways real projects write layer sizes (#23 §2), through the command line.

Each idiom is a fixture under ``fixtures/size_idioms`` (its ``# expect:`` lines are
also checked by tests/test_fixtures.py); here: that each finding points at the layer
and its related locations at where the value is written, and the cases that must
stay quiet."""
from __future__ import annotations

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IDIOMS = "fixtures/size_idioms"


@pytest.fixture(scope="module")
def found(amplint):
    proc = amplint("check", IDIOMS, "--select", "AMP201", "--format", "json", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    out = {}
    for f in json.loads(proc.stdout):
        out.setdefault((os.path.relpath(f["path"], IDIOMS), f["line"]), f)
    return out


def _related(finding) -> set:
    return {(os.path.relpath(r["path"], IDIOMS), r["line"]) for r in finding["related"]}


@pytest.mark.parametrize("where, size, written", [
    (("call_site_config.py", 16), "30522", ("call_site_config.py", 19)),
    (("attribute_set.py", 14), "30522", ("attribute_set.py", 18)),
    (("arithmetic_call.py", 8), "145", ("arithmetic_call.py", 11)),
    (("factory.py", 9), "44", ("factory.py", 13)),
    (("constructors.py", 8), "100", ("constructors.py", 18)),
    (("kwargs_dict.py", 6), "300", ("kwargs_dict.py", 13)),
    (("stages.py", 13), "116", ("stages.py", 4)),
    (("stages.py", 16), "116", ("stages.py", 4)),
    (("argparse_flag/argp_model.py", 7), "100", ("argparse_flag/train.py", 7)),
    (("argparse_dict/dict_model.py", 7), "300", ("argparse_dict/dict_opts.py", 6)),
    (("width_module/width_net.py", 10), "36", ("width_module/width_config.py", 2)),
    (("layer_helper/helper_head.py", 10), "473", ("layer_helper/helper_layers.py", 6)),
])
def test_idiom_points_at_the_layer_and_where_the_value_is_written(found, where, size, written):
    assert where in found, sorted(found)
    finding = found[where]
    assert f" {size}" in finding["message"]
    assert written in _related(finding)


def test_a_config_linted_alone_is_reported_at_its_defaults(found):
    assert "`AloneBertConfig.vocab_size` = 30522" in found[("config_alone/configuration_alone.py", 10)]["message"]
    assert "`AloneLMConfig.n_embd` = 770" in found[("config_alone/configuration_alone.py", 20)]["message"]
    # hidden_size 768 is aligned; num_labels, max_position_embeddings, block_size are no layer sizes
    assert not [k for k in found if k[0].startswith("config_alone") and k[1] not in (10, 20)]


def test_a_default_every_site_overrides_with_an_aligned_value_is_not_reported(found, amplint):
    assert not [k for k in found if k[0].startswith("clean")]
    # the model file alone: no site builds the config, the 50257 default is the size
    alone = amplint("check", f"{IDIOMS}/clean/gpt2_override/ovr_model.py", "--select", "AMP201",
                    "--format", "json", "--no-cache")
    assert sorted(f["line"] for f in json.loads(alone.stdout)) == [16, 17]


def test_sites_that_pass_an_unaligned_value_keep_the_default_reported(tmp_path, amplint):
    (tmp_path / "m.py").write_text(
        "from dataclasses import dataclass\nfrom torch import nn\n\n@dataclass\nclass TConfig:\n"
        "    vocab_size: int = 50257\n\nclass T(nn.Module):\n    def __init__(self, config):\n"
        "        super().__init__()\n        self.wte = nn.Embedding(config.vocab_size, 768)\n\n"
        "a = T(TConfig(vocab_size=50304))\nb = T(TConfig())\n"
    )
    proc = amplint("check", str(tmp_path), "--select", "AMP201", "--format", "json", "--no-cache")
    assert [f["line"] for f in json.loads(proc.stdout)] == [11]


def test_layer_sizes_accessor_gives_every_value_with_its_site():
    import ast as _ast

    from amplint.config import Settings
    from amplint.context import FileContext
    from amplint.semantic.sizes import LayerSizes

    path = os.path.join(ROOT, IDIOMS, "stages.py")
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    ctx = FileContext(path, source, _ast.parse(source), Settings())
    ctx.ensure_walked()
    conv = next(c for c in ctx.calls if _ast.unparse(c.func) == "nn.Conv2d")
    sizes = ctx.get(LayerSizes).of(conv)
    assert sorted({v.value for v in sizes["in_channels"]}) == [24, 116, 176, 232, 352]
    assert all(v.origin and v.origin[-1].line == 4 for v in sizes["in_channels"])


def test_a_small_width_is_reported_when_it_is_a_hidden_width(found):
    lines = sorted(k[1] for k in found if k[0] == "hidden_small.py")
    # conv1 writes 10 and conv2 reads it; 3 colour channels, the 2/4 heads, 10 landmarks: the data's
    assert lines == [10, 11]
    assert "out_channels is 10" in found[("hidden_small.py", 10)]["message"]


def test_a_layer_class_bound_to_a_name_is_a_layer(found):
    assert "`RNN` (an `nn.LSTM`) hidden_size is 300" in found[("layer_alias.py", 9)]["message"]


def test_a_width_no_value_of_its_inputs_can_align_is_reported(found):
    assert sorted(k[1] for k in found if k[0] == "odd_width.py") == [11, 13]
    assert "odd for every value of its inputs" in found[("odd_width.py", 11)]["message"]
    assert "never a multiple of 8" in found[("odd_width.py", 13)]["message"]


def test_fp8_rules_read_sizes_through_the_semantic_core(amplint):
    """A LoRA rank reaches nn.Linear through a config default and a **kwargs dict at the
    call site (peft): AMP702/AMP703 see it as AMP201 would; AMP701 sees an nn.Linear
    subclass's own weight through F.linear, and no weight-times-weight merge."""
    proc = amplint("check", "fixtures/fp8/lora.py", "--target", "fp8", "--select", "AMP701,AMP702,AMP703,AMP704",
                   "--format", "json", "--no-cache")
    found = sorted((f["line"], f["code"]) for f in json.loads(proc.stdout))
    # ... and a class wrapping one nn.Linear, bound as the LM head, is the head (AMP704)
    assert found == [(25, "AMP702"), (25, "AMP703"), (26, "AMP702"), (26, "AMP703"), (33, "AMP701"),
                     (57, "AMP704")], found
    messages = {(f["line"], f["code"]): f["message"] for f in json.loads(proc.stdout)}
    assert "out_features 8 is not a multiple of 16" in messages[(25, "AMP702")]


def test_width_lists_per_branch_and_library_layers(found):
    finding = found[("branch_widths.py", 10)]
    assert "out_channels is 116" in finding["message"]
    assert ("branch_widths.py", 19) in _related(finding)  # channels = [116, 232, 464]
    assert "`ConvModule` (an `nn.Conv2d`) out_channels is 100" in found[("library_layer.py", 9)]["message"]


def test_a_layer_never_built_and_a_branch_off_by_default_are_quiet(found):
    assert not [k for k in found if k[0] == "clean/not_built.py"]


def test_an_aligned_default_a_call_site_overrides_and_a_width_through_two_helpers(found):
    assert sorted(k[1] for k in found if k[0] == "helper_chain.py") == [23]
    finding = found[("helper_chain.py", 23)]
    assert "out_channels is 11" in finding["message"]
    assert ("helper_chain.py", 30) in _related(finding)  # Stem(width=11)


def test_stage_width_lists_through_list_parameters_comprehensions_and_loops(found):
    """pytorchcv's HRNet and ShuffleNetV2: nested width lists per version, a list
    parameter without a default (its call sites), ``self`` stored twice, a comprehension
    of ``[c] * n``, two nested loops over lists of lists."""
    assert sorted(k[1] for k in found if k[0] == "stage_lists.py") == [16, 50]
    branch = _related(found[("stage_lists.py", 16)])
    assert ("stage_lists.py", 38) in branch  # channels = [[18, 36], ...] of version w18
    assert ("stage_lists.py", 40) not in branch  # the w32 branch is aligned: not in the trail
    halved = found[("stage_lists.py", 50)]
    assert "in_channels 58" in halved["message"]
    assert {("stage_lists.py", 49), ("stage_lists.py", 66)} <= _related(halved)  # mid_channels, the widths


def test_sizes_fixed_by_cls_in_the_models_own_classmethod(found):
    finding = found[("classmethod_factory.py", 9)]
    assert "in_features is 42" in finding["message"]  # 7 * 6
    assert ("classmethod_factory.py", 19) in _related(finding)  # cls(..., num_spherical=7, num_radial=6)


def test_a_helper_size_computed_from_its_parameters_through_saved_hyperparameters(found):
    """pytorch-forecasting's TFT: ``d_model // n_head`` of another file's attention block
    (written by one layer, read by the next: hidden, though below the floor), with the
    values from ``self.hparams`` (the ``__init__`` defaults of a Lightning module)."""
    finding = found[("formula_helper/lit_forecaster.py", 12)]
    assert "out_features of `nn.Linear` 4" in finding["message"]
    related = _related(finding)
    assert ("formula_helper/lit_forecaster.py", 9) in related  # the defaults 16 and 4
    assert ("formula_helper/head_blocks.py", 12) in related  # v_layer, where d_model // n_head lands


def test_a_field_without_a_numeric_default_takes_its_presets_numbers(found):
    """litgpt: ``padded_vocab_size = None`` (computed in ``__post_init__``) and named presets
    ``dict(name=..., padded_vocab_size=32001)`` at module level of the config file."""
    finding = found[("config_presets/preset_model.py", 10)]
    assert "out_features is 32001" in finding["message"]
    assert ("config_presets/preset_config.py", 25) in _related(finding)
    assert ("config_presets/preset_config.py", 26) not in _related(finding)  # 50304 is aligned
    assert not [k for k in found if k[0] == "config_presets/preset_config.py"]


def test_a_small_width_hidden_in_the_module_that_passes_it_to_a_helper(found):
    """NASNet's cells: 20 is one helper call's output and the next one's input in ``Cell``;
    inside ``SepConv`` the only other layer is depthwise (no GEMM, not counted)."""
    assert sorted(k[1] for k in found if k[0] == "hidden_through_helper.py") == [12]
    finding = found[("hidden_through_helper.py", 12)]
    assert "in_channels 20" in finding["message"]
    assert {("hidden_through_helper.py", 18), ("hidden_through_helper.py", 19)} <= _related(finding)


def test_the_top_models_own_input_and_output_widths_are_the_datas(found):
    """tortoise's DiffusionTts(in_channels=100, out_channels=200): mel bins, data-bound; a
    block the model builds keeps its ``in_channels=100`` default reported."""
    assert sorted(k[1] for k in found if k[0] == "model_edges.py") == [11]
    assert "in_channels is 100" in found[("model_edges.py", 11)]["message"]
