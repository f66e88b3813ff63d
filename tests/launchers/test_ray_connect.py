"""The one line for a Ray cluster the tuner cannot reach, with the token hint where a token is set."""

from __future__ import annotations

from pathlib import Path

from nccl_tune.launchers.ray_launcher import connect_problem

REFUSED = "Failed to connect to Ray cluster at 10.0.0.4:6379\nmore detail"


def test_a_cluster_that_cannot_be_reached_is_named_with_the_fix(tmp_path: Path) -> None:
    line = connect_problem("10.0.0.4:6379", REFUSED, {}, tmp_path)
    assert line == (
        "cannot connect to the Ray cluster at 10.0.0.4:6379 (Failed to connect to Ray cluster at "
        "10.0.0.4:6379): start it (`ray start --head`) or give --ray-address HOST:PORT"
    )


def test_a_token_on_this_machine_points_at_token_authentication(tmp_path: Path) -> None:
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("0123456789abcdef")
    line = connect_problem("10.0.0.4:6379", REFUSED, {}, tmp_path)
    assert line.endswith(
        f"; a Ray token is set here ({tmp_path / '.ray' / 'auth_token'}): if the cluster uses "
        "token authentication, set RAY_AUTH_MODE=token"
    )
    assert "\n" not in line
    by_env = connect_problem("10.0.0.4:6379", REFUSED, {"RAY_AUTH_TOKEN": "x"}, tmp_path / "nowhere")
    assert "a Ray token is set here (RAY_AUTH_TOKEN)" in by_env
    assert "RAY_AUTH_MODE" not in connect_problem("10.0.0.4:6379", REFUSED, {"RAY_AUTH_MODE": "token"}, tmp_path), (
        "the mode is already chosen: the token is not the problem to name"
    )
    assert connect_problem("auto", "", {}, tmp_path / "nowhere").startswith(
        "cannot connect to the Ray cluster at auto (no reason given)"
    )
