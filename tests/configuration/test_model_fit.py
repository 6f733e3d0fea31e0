"""Settings that depend on the model (workflow/config/README.md, "What a small checkpoint needs"): the long-context
defaults fitted to a small or causal model with one log line, a value the user set otherwise refused in one line,
a checkpoint without tokenizer files and a max_tokens beyond the model's positions refused at validation."""
import copy
import shutil

import pytest
import yaml

from attncert.configuration.config import ConfigError, fit_to_model, validate_config
from conftest import REPO

DEFAULT = yaml.safe_load((REPO / "workflow" / "config" / "default.yaml").read_text())


def _config(model_dir, family, **long_context):
    cfg = copy.deepcopy(DEFAULT)
    cfg["model"] = {"name": "mine", "family": family, "source": str(model_dir)}
    cfg["long_context"].update(long_context)
    return validate_config(cfg, base_dir=REPO)


def test_the_default_long_context_grid_is_fitted_to_a_small_causal_model(tiny_gpt2_dir):
    cfg = _config(tiny_gpt2_dir, "gpt2")  # 3 layers, 2 heads, 64 positions
    line = fit_to_model(cfg, DEFAULT)
    lc = cfg["long_context"]
    assert (lc["layer"], lc["heads"], lc["lengths"], lc["query_position"]) == (2, [0], [16, 64], "last")
    assert line == ("long_context fitted to the model (3 layers, 2 heads, 64 positions, causal): heads [0, 3, 6, 9] "
                    "-> [0]; lengths [16, 64, 128, 256, 512] -> [16, 64]; query_position 4 -> last (set them with "
                    "--config 'long_context={...}')")


def test_a_bidirectional_model_keeps_its_query_position_and_the_embedded_run_is_unchanged(tiny_bert_dir):
    cfg = _config(tiny_bert_dir, "bert", layer=5)
    with pytest.raises(ConfigError, match=r"^config key 'long_context.layer': layer 5 out of range, the model has 3 "
                                          r"layers; fix: use a layer 0\.\.2"):
        fit_to_model(cfg, DEFAULT)
    cfg = _config(tiny_bert_dir, "bert")
    assert "query_position" not in fit_to_model(cfg, DEFAULT) and cfg["long_context"]["query_position"] == 4
    embedded = validate_config(copy.deepcopy(DEFAULT), base_dir=REPO)
    before = copy.deepcopy(embedded)
    assert fit_to_model(embedded, DEFAULT) == "" and embedded == before


@pytest.mark.parametrize("setting, message", [
    ({"heads": [0, 5]}, "'long_context.heads': head 5 out of range, the model has 2 heads; fix: use heads 0..1"),
    ({"lengths": [16, 100]}, "'long_context.lengths': length 100 exceeds the model's 64 positions; fix: use lengths "
                             "up to 64"),
    ({"query_position": 7}, "'long_context.query_position': index 7 on a causal model attends 8 keys at every "
                            "length; fix: use 'last'"),
])
def test_a_value_the_user_set_that_does_not_fit_is_refused_in_one_line(tiny_gpt2_dir, setting, message):
    with pytest.raises(ConfigError) as err:
        fit_to_model(_config(tiny_gpt2_dir, "gpt2", **setting), DEFAULT)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_query_position_beyond_the_shortest_length_is_refused(tiny_bert_dir):
    with pytest.raises(ConfigError, match="'long_context.query_position': 20 >= the shortest length 16; fix: use an "
                                          "index below the shortest length, or 'last'"):
        fit_to_model(_config(tiny_bert_dir, "bert", query_position=20), DEFAULT)


def test_a_checkpoint_without_tokenizer_files_is_refused(tmp_path, tiny_gpt2_dir):
    for name in ("config.json", "model.safetensors"):  # what model.save_pretrained alone writes
        shutil.copy(tiny_gpt2_dir / name, tmp_path / name)
    with pytest.raises(ConfigError, match=r"holds a model but no tokenizer .*; fix: save the model's tokenizer into "
                                          r"it, tokenizer\.save_pretrained\("):
        _config(tmp_path, "gpt2")


def test_max_tokens_beyond_the_models_positions_is_refused(tiny_gpt2_dir):
    cfg = copy.deepcopy(DEFAULT)
    cfg.update(model={"name": "mine", "family": "gpt2", "source": str(tiny_gpt2_dir)}, max_tokens=65)
    with pytest.raises(ConfigError, match="'max_tokens': 65 exceeds the model's 64 positions; fix: use max_tokens <= "
                                          "64"):
        validate_config(cfg, base_dir=REPO)
