"""The training config: TOML loading, validation messages, resume compatibility."""

from __future__ import annotations

import pytest

from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.training.config import TrainConfig, load_config
from pep_gp.pipeline.errors import InputError


def test_defaults_follow_the_papers():
    config = load_config(None)
    assert (config.model, config.batch_size, config.rows_per_block, config.learning_rate) == ({}, 10_000, 1_000, 0.01)
    assert config == TrainConfig()


def test_blocks_follow_a_small_batch_unless_set():
    assert load_config(None, batch_size=128).rows_per_block == 128
    assert load_config(None, batch_size=128, block_rows=64).rows_per_block == 64


def test_toml_with_overrides(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text("epochs = 4\nlr_schedule = 'cosine'\n[model]\nnum_inducing = 20\n")
    config = load_config(path, epochs=7, batch_size=None)
    assert (config.model, config.epochs, config.lr_schedule, config.batch_size) == ({"num_inducing": 20}, 7, "cosine",
                                                                                    10_000)


@pytest.mark.parametrize("text, expected", [
    ("epochs = 0\n", "epochs: Input should be greater than or equal to 1 (found 0)"),
    ("num_inducing = 5\n", "num_inducing: Extra inputs are not permitted (found 5) (a model's settings go in the "
                           "[model] table)"),
    ("learning_rate = 'half'\n", "learning_rate: Input should be a valid number"),
    ("batch_size = 10\nblock_rows = 20\n", "batch_size (10) is smaller than block_rows (20); lower block_rows or "
                                            "leave it unset"),
    ("epochs = \n", "not a readable TOML file"),
])
def test_bad_config_names_file_and_key(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError, match="bad.toml") as error:
        load_config(path)
    assert expected in str(error.value)


def test_missing_file():
    with pytest.raises(InputError, match="nope.toml: no such config file"):
        load_config("nope.toml")


def test_resume_compatibility():
    config = TrainConfig(epochs=2)
    assert config.incompatibilities(config.model_copy(update={"epochs": 9, "keep_checkpoints": 1})) == []
    assert config.incompatibilities(config.model_copy(update={"learning_rate": 0.1})) == ["learning_rate: 0.01 → 0.1"]
    cosine = TrainConfig(lr_schedule="cosine")
    assert cosine.incompatibilities(cosine.model_copy(update={"epochs": 20})) == ["epochs: 10 → 20"]
    settings = TrainConfig(model={"alpha": 0.5})
    assert settings.incompatibilities(settings.model_copy(update={"model": {"alpha": 0.2, "num_inducing": 9}})) == [
        "model.alpha: 0.5 → 0.2", "model.num_inducing: None → 9"]


def test_for_rows_caps_blocks_and_batches():
    small = TrainConfig(block_rows=1000, batch_size=5000).for_rows(450)
    assert (small.block_rows, small.batch_size) == (450, 450)
    assert TrainConfig(block_rows=100, batch_size=5000).for_rows(450).batch_size == 500


def test_misspelt_config_model_and_setting_names_get_the_closest_name(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("epoch = 3\n")
    with pytest.raises(InputError, match=r"epoch: Extra inputs are not permitted \(found 3\) \(did you mean "
                                         r"'epochs'\?\)"):
        load_config(path)
    with pytest.raises(InputError, match=r"unknown model 'sparse-gp-clasifier'; .* \(did you mean "
                                         r"'sparse-gp-classifier'\?\)"):
        get_model("sparse-gp-clasifier")
    with pytest.raises(InputError, match=r"model.num_inducng: .* \(did you mean 'num_inducing'\?\)"):
        model_settings(get_model("sparse-gp-classifier"), {"num_inducng": 3})
