"""Prints a Hydra application's --help the way Hydra's default help template lays it out
(header, configuration groups, then the composed config under == Config ==, then the footer);
any other invocation is refused, so a test sees it if anything but --help was run."""

import sys

HELP = """hydra_app is powered by Hydra.

== Configuration groups ==
Compose your configuration from those groups (group=option)

generator: vllm


== Config ==
Override anything in the config (foo.bar=value)

trainer:
  train_batch_size: 256
  micro_train_batch_size_per_gpu: 1
  max_prompt_length: 6000
  ckpt_path: ${oc.env:HOME}/ckpts
  log_every_n_steps: 10
  policy:
    fsdp_config:
      cpu_offload: false
  gradient_checkpointing: true
  eval_batch_size: 1024
data:
  num_workers: 8
  train_data: ???
generator:
  n_samples_per_prompt: 5


Powered by Hydra (https://hydra.cc)
Use --hydra-help to view Hydra specific help
"""

if sys.argv[1:] == ["--help"]:
    print(HELP)
    sys.exit(0)
print("refusing to train in a test", file=sys.stderr)
sys.exit(3)
