"""The training config: TOML loading, validation messages, resume compatibility."""

from __future__ import annotations

import math

import pytest

from pep_gp.pipeline.models import get_model, model_settings
from pep_gp.pipeline.runs.config import TrainConfig, load_config
from pep_gp.pipeline.data.sizes import bucket, held_out_rows
from pep_gp.pipeline.errors import InputError


def test_the_defaults_train_until_converged():
    config = load_config(None)
    assert (config.model, config.batch_size, config.rows_per_block, config.learning_rate) == ({}, 10_000, 1_000, 0.05)
    assert (config.epochs, config.max_steps, config.tol, config.stops_early) == (None, None, 1e-4, True)
    assert config.total_steps(steps_per_epoch=27) == 2_000  # no epochs: the stopping rule or 2,000 steps
    assert TrainConfig(epochs=3).total_steps(27) == 81 and not TrainConfig(epochs=3).stops_early
    assert TrainConfig(epochs=3, max_steps=50).total_steps(27) == 50
    assert config == TrainConfig()


def test_settings_from_the_command_line_nest_and_read_toml_values():
    from pep_gp.pipeline.runs.config import parse_settings

    values = parse_settings(["model.alpha=0.5", "lr_schedule=cosine", "model.hidden_dims=[2, 2]", "tol=0"])
    assert values == {"model": {"alpha": 0.5, "hidden_dims": [2, 2]}, "lr_schedule": "cosine", "tol": 0}
    config = load_config(None, values, epochs=3)
    assert (config.model, config.lr_schedule, config.tol, config.epochs) == (values["model"], "cosine", 0.0, 3)
    with pytest.raises(InputError, match="--set 'alpha': expected KEY=VALUE"):
        parse_settings(["alpha"])


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
    assert config.incompatibilities(config.model_copy(update={"learning_rate": 0.1})) == ["learning_rate: 0.05 → 0.1"]
    cosine = TrainConfig(lr_schedule="cosine", epochs=10)
    assert cosine.incompatibilities(cosine.model_copy(update={"epochs": 20})) == ["epochs: 10 → 20"]
    settings = TrainConfig(model={"alpha": 0.5})
    assert settings.incompatibilities(settings.model_copy(update={"model": {"alpha": 0.2, "num_inducing": 9}})) == [
        "model.alpha: 0.5 → 0.2", "model.num_inducing: None → 9"]


def test_for_rows_caps_blocks_and_batches():
    small = TrainConfig(block_rows=1000, batch_size=5000).for_rows(450)
    assert (small.block_rows, small.batch_size) == (512, 512)  # one block, padded to a bucket size
    assert TrainConfig(block_rows=100, batch_size=5000).for_rows(450).batch_size == 500


def test_buckets_are_four_sizes_an_octave_and_pad_less_than_a_quarter_of_the_rows():
    sizes = {bucket(n) for n in range(1, 4097)}
    assert sorted(sizes) == [256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096]
    assert all(n <= bucket(n) < 1.25 * n for n in range(257, 4097)) and all(bucket(s) == s for s in sizes)


def test_held_out_rows_go_in_blocks_of_their_own_bucket_no_larger_than_the_training_blocks():
    """35 validation rows beside a 320-row training block are scored in blocks of 40, not 320 (a deep GP's or a
    multi-class predictive costs more per row than a step); never above the training blocks' size."""
    assert [held_out_rows(320, n) for n in (1, 20, 35, 82, 300, 5000)] == [32, 32, 40, 96, 320, 320]
    assert held_out_rows(1000, 600) == 640 and held_out_rows(24, 35) == 24


@pytest.mark.parametrize("rows, block, batch", [(1437, 768, 1536), (2400, 896, 2688), (824, 896, 896),
                                                (1000, 1000, 1000), (5000, 1000, 5000), (2001, 768, 2304)])
def test_a_batch_of_every_row_is_cut_into_equal_shares(rows, block, batch):
    """Blocks as few as ``block_rows``' 1,000 allow, of equal shares padded to a bucket size (padding is
    arithmetic where the rows are the step's cost); a set ``block_rows`` or a smaller batch keeps its blocks."""
    config = TrainConfig(batch_size=10_000).for_rows(rows)
    assert (config.block_rows, config.batch_size) == (block, batch)
    assert math.ceil(rows / block) == math.ceil(rows / 1000) and batch - rows < block
    assert TrainConfig(batch_size=10_000, block_rows=1000).for_rows(rows).block_rows == min(1000, bucket(rows))
    assert TrainConfig(batch_size=500).for_rows(rows).block_rows == 500


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


def test_a_model_s_own_defaults_fill_only_the_fields_a_config_leaves_out():
    """The deep GPs' defaults (Adam 0.01, 1,000 steps, no early stop) replace pep's where nothing was given;
    a given field, and ``epochs`` (which lifts the step cap), win."""
    deep = get_model("deep-gp").train_defaults
    assert TrainConfig(batch_size=64).with_defaults(deep).model_dump(include={"learning_rate", "max_steps", "tol", "batch_size"}) == {
        "learning_rate": 0.01, "max_steps": 1000, "tol": 0.0, "batch_size": 64}
    given = TrainConfig(learning_rate=0.05, epochs=3).with_defaults(deep)
    assert (given.learning_rate, given.max_steps, given.tol, given.total_steps(10)) == (0.05, None, 0.0, 30)
    assert TrainConfig(max_steps=5).with_defaults(deep).total_steps(1) == 5
    assert TrainConfig(batch_size=64).with_defaults(get_model("sparse-gp-classifier").train_defaults) == TrainConfig(batch_size=64)
    resumed = TrainConfig(**TrainConfig().model_dump())  # a run's stored config: every field given
    assert resumed.with_defaults(deep) == TrainConfig()


def test_label_noise_is_a_multiclass_setting_refused_out_of_range_or_beside_another_power():
    spec = get_model("multiclass-sep")
    assert model_settings(spec, {"label_noise": 0.1}).label_noise == 0.1
    with pytest.raises(InputError, match=r"model\.label_noise: Input should be less than 1 \(found 1\.0\)"):
        model_settings(spec, {"label_noise": 1.0}, "--set")
    with pytest.raises(InputError, match=r"model\.label_noise: Value error, label_noise = 0\.1 needs alpha = 1"):
        model_settings(spec, {"alpha": 0.5, "label_noise": 0.1}, "--set")
