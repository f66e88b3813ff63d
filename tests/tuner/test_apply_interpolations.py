"""``nccl-tune apply`` into a config that holds OmegaConf interpolations: they are merged as written,
never resolved; only what cannot be merged is refused, in one line; what the merge changed that a
reader would not guess is said."""

from __future__ import annotations

import pytest
import yaml

from tests.tuner.conftest import one_line_error, run_cli

pytestmark = pytest.mark.timeout(60)

CONFIG = """# the run's config
trainer:
  micro: 2            # per-GPU micro batch
  train_batch_size: 64
  lr: ${eval:'1e-6 * 2'}
  log_path: ${paths.root}/logs
  ckpt_path: ???
  epochs: ${trainer.micro}
  sub: ${paths.sub}
"""


def apply(tmp_path, overrides: str, extra: str = ""):
    (tmp_path / "cfg.yaml").write_text(CONFIG)
    (tmp_path / "tuned.yaml").write_text(f"overrides:\n{overrides}{extra}")
    return run_cli(["apply", "tuned.yaml", "--into", "cfg.yaml"], cwd=tmp_path)


def test_interpolations_beside_the_tuned_keys_are_kept_as_written(tmp_path):
    proc = apply(tmp_path, "  trainer:\n    micro: 4\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    merged = yaml.safe_load(proc.stdout)["trainer"]
    assert merged["micro"] == 4
    assert merged["lr"] == "${eval:'1e-6 * 2'}" and merged["log_path"] == "${paths.root}/logs"
    assert merged["ckpt_path"] == "???" and merged["epochs"] == "${trainer.micro}"


@pytest.mark.parametrize(
    ("key", "was"),
    [("lr", "${eval:'1e-6 * 2'}"), ("log_path", "${paths.root}/logs"), ("ckpt_path", "???")],
)
def test_a_tuned_key_that_was_an_interpolation_is_set_and_said(tmp_path, key, was):
    proc = apply(tmp_path, f"  trainer:\n    {key}: 7\n")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert yaml.safe_load(proc.stdout)["trainer"][key] == 7
    assert f"# cfg.yaml: trainer.{key} was {was}; it is now 7" in proc.stderr


def test_a_key_inside_an_interpolation_cannot_be_merged_and_says_so(tmp_path):
    proc = apply(tmp_path, "  trainer:\n    sub:\n      a: 1\n")
    one_line_error(proc, "cfg.yaml: trainer.sub is the interpolation ${paths.sub}", "sets trainer.sub.a inside it")


def test_a_key_the_config_lacks_is_still_refused(tmp_path):
    proc = apply(tmp_path, "  trainer:\n    nope: 1\n")
    one_line_error(proc, "has no key trainer.nope from tuned.yaml")


def test_a_change_to_the_training_and_the_lost_comments_are_said(tmp_path):
    extra = "semantic_changes:\n- 'trainer.train_batch_size: 64 -> 128'\n"
    proc = apply(tmp_path, "  trainer:\n    train_batch_size: 128\n", extra)
    assert proc.returncode == 0, proc.stderr
    assert "# tuned.yaml changes the training itself, not only its speed:" in proc.stderr
    assert "#   trainer.train_batch_size: 64 -> 128" in proc.stderr
    assert "# the comments of cfg.yaml are not in the merged config" in proc.stderr


def test_apply_says_each_change_to_the_training_with_its_meaning_apart_from_the_speed_only_ones(tmp_path):
    """The semantic parameters are named by the file (``semantic_parameters``): a value the merge
    changes in this config counts as a change to the training even where the study's own baseline
    already ran it (the config here has 64, the study ran 128); what it means comes from the space."""
    extra = (
        "semantic_changes: []\n"
        "semantic_parameters: [trainer.train_batch_size]\n"
        "semantic_help: {trainer.train_batch_size: Prompts per training step}\n"
    )
    proc = apply(tmp_path, "  trainer:\n    train_batch_size: 128\n    micro: 4\n    lr: ${eval:'1e-6 * 2'}\n", extra)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("#")]
    training = lines.index("# tuned.yaml changes the training itself, not only its speed:")
    speed = lines.index("# speed only (the training stays as it was):")
    assert lines[training + 1] == "#   trainer.train_batch_size: 64 -> 128 (Prompts per training step)"
    assert lines[speed + 1 :][:1] == ["#   trainer.micro: 2 -> 4"]
    assert not any(line.startswith("#   trainer.lr") for line in lines), lines  # unchanged: not listed
