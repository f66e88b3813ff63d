"""A trial command that calls ray.init() as SkyRL does (no address) and reports, from a Ray worker,
the NCCL variable the trial set, and which cluster it joined; then three steps."""

import os
import sys

import ray

ray.init(log_to_driver=False)


@ray.remote(num_cpus=0)
def worker_env() -> str:
    return os.environ.get("NCCL_PROTO", "<unset>")


print(f"WORKER_NCCL_PROTO={ray.get(worker_env.remote())}", flush=True)
print(f"GCS={ray.get_runtime_context().gcs_address}", flush=True)
print(f"RAY_TMPDIR={os.environ.get('RAY_TMPDIR', '')}", flush=True)
ray.shutdown()
if "--steps" in sys.argv:
    for _ in range(3):
        print("Finished: 'step', time cost: 0.10s", flush=True)
