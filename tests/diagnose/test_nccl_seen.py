"""NCCL's own report of the variables it read, per rank, against what a trial set."""

from __future__ import annotations

from nccl_tune.diagnose.nccl_seen import parse_seen, probe_env, same_value, unreached

LINES = [
    "(FSDPPolicyWorkerBase pid=11) node:11:28 [0] NCCL INFO NCCL_PROTO set by environment to LL128",
    "\x1b[36m(FSDPPolicyWorkerBase pid=11)\x1b[0m node:11:28 [0] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0",
    "node:12:29 [1] NCCL INFO NCCL_PROTO set by environment to LL128",
    "node:12:29 [1] NCCL INFO NCCL_CUMEM_ENABLE set by environment to 0",
    "node:12:29 [1] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304",
    "node:12:29 [1] NCCL INFO Channel 00/16 : 0 1",
]


def test_every_rank_s_report_is_collected():
    seen = parse_seen(LINES)
    assert seen == {
        "node:11 [0]": {"NCCL_PROTO": "LL128", "NCCL_CUMEM_ENABLE": "0"},
        "node:12 [1]": {"NCCL_PROTO": "LL128", "NCCL_CUMEM_ENABLE": "0", "NCCL_BUFFSIZE": "4194304"},
    }


def test_a_value_the_trainer_overrides_is_unreached_with_its_reason():
    seen = parse_seen(LINES[:4])
    (u,) = unreached(["NCCL_PROTO", "NCCL_CUMEM_ENABLE"], {"NCCL_PROTO": "LL128", "NCCL_CUMEM_ENABLE": "1"}, seen)
    assert u.name == "NCCL_CUMEM_ENABLE" and u.seen == ("0", "0")
    assert u.reason == "NCCL_CUMEM_ENABLE: the trainer sets it to 0 on its workers (weight sync over NCCL)"
    # unset by the trial but reported by NCCL: someone else sets it, the value is not the trial's
    (u,) = unreached(["NCCL_CUMEM_ENABLE"], {"NCCL_CUMEM_ENABLE": None}, seen)
    assert u.set_value is None


def test_a_value_no_rank_reports_never_reached_nccl():
    seen = parse_seen(LINES[:4])
    (u,) = unreached(["NCCL_ALGO"], {"NCCL_ALGO": "Ring"}, seen)
    assert "reported no NCCL_ALGO on any rank" in u.reason


def test_nothing_is_told_without_a_report_and_numbers_compare_as_numbers():
    assert unreached(["NCCL_PROTO"], {"NCCL_PROTO": "LL"}, {}) == []
    assert same_value("0x400000", "4194304") and same_value(None, None) and not same_value("1", None)
    seen = parse_seen(LINES[2:5])
    assert unreached(["NCCL_BUFFSIZE"], {"NCCL_BUFFSIZE": "0x400000"}, seen) == []


def test_an_integer_parameter_is_read_without_the_full_stop_nccl_prints_after_it():
    # ncclLoadParam: "%s set by environment to %lld." (NCCL_BUFFSIZE, NCCL_NTHREADS, ...); strings have none
    lines = [
        "gpu-node:4242:4259 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.",
        "gpu-node:4242:4259 [0] NCCL INFO NCCL_NTHREADS set by environment to -1.",
        "gpu-node:4242:4259 [0] NCCL INFO NCCL_PROTO set by environment to LL128",
        "gpu-node:4242:4259 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0.",
    ]
    seen = parse_seen(lines)
    assert seen == {
        "gpu-node:4242 [0]": {
            "NCCL_BUFFSIZE": "4194304",
            "NCCL_NTHREADS": "-1",
            "NCCL_PROTO": "LL128",
            "NCCL_SOCKET_IFNAME": "eth0.",
        }
    }
    assert unreached(["NCCL_BUFFSIZE"], {"NCCL_BUFFSIZE": "0x400000"}, seen) == []


def test_the_probe_turns_on_the_env_report_without_dropping_the_user_s_subsystems():
    assert probe_env({}) == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"}
    assert probe_env({"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "NET"}) == {"NCCL_DEBUG_SUBSYS": "NET,ENV"}
    assert probe_env({"NCCL_DEBUG": "info", "NCCL_DEBUG_SUBSYS": "ALL"}) == {}
