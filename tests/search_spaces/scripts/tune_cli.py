"""torchtune's ``tune`` as far as a starter space needs it: ``tune cat CONFIG`` prints the config
(a trimmed ``llama3_1/8B_full`` of torchtune v0.6.1; ``TUNE_CONFIG`` names another file), and
``tune run`` refuses ``--help`` for the recipe's keys as the real one does (its help lists only the
launcher's flags)."""

import os
import sys
from pathlib import Path

CONFIG = """\
output_dir: /tmp/torchtune/llama3_1_8B/full
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Meta-Llama-3.1-8B-Instruct/original/tokenizer.model
  max_seq_len: null
dataset:
  _component_: torchtune.datasets.alpaca_dataset
  packed: false
seed: null
batch_size: 2
epochs: 1
max_steps_per_epoch: null
gradient_accumulation_steps: 1
compile: false
optimizer_in_bwd: false
enable_activation_checkpointing: true
enable_activation_offloading: false
fsdp_cpu_offload: false
metric_logger:
  _component_: torchtune.training.metric_logging.DiskLogger
  log_dir: ${output_dir}/logs
log_every_n_steps: 1
log_peak_memory_stats: true
"""

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["cat"]:
        other = os.environ.get("TUNE_CONFIG")
        print(Path(other).read_text() if other else CONFIG)
    else:
        print("usage: tune run [-h] [--nproc-per-node NPROC_PER_NODE] recipe --config CONFIG")
