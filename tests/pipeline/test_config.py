"""The training config: TOML loading, validation messages, resume compatibility."""

from __future__ import annotations

import pytest

from pipeline.config import TrainConfig, load_config
from pipeline.errors import InputError


def test_defaults_follow_the_papers():
    config = load_config(None)
    assert (config.num_inducing, config.alpha, config.damping) == (200, None, 1.0)
    assert config == TrainConfig()


def test_toml_with_overrides(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text("num_inducing = 20\nepochs = 4\nlr_schedule = 'cosine'\n")
    config = load_config(path, epochs=7, batch_size=None)
    assert (config.num_inducing, config.epochs, config.lr_schedule, config.batch_size) == (20, 7, "cosine", 10_000)


@pytest.mark.parametrize("text, expected", [
    ("num_inducing = 0\n", "num_inducing: Input should be greater than or equal to 1 (found 0)"),
    ("inducing = 5\n", "inducing: Extra inputs are not permitted"),
    ("alpha = 'half'\n", "alpha: Input should be a valid number"),
    ("batch_size = 10\nblock_rows = 20\n", "batch_size (10) must be at least block_rows (20)"),
    ("num_inducing = \n", "not a readable TOML file"),
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


def test_for_rows_caps_blocks_and_batches():
    small = TrainConfig(block_rows=1000, batch_size=5000).for_rows(450)
    assert (small.block_rows, small.batch_size) == (450, 450)
    assert TrainConfig(block_rows=100, batch_size=5000).for_rows(450).batch_size == 500
