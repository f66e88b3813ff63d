#!/usr/bin/env bash
# The GPU run in one call, from the repository root on a GPU node without network (docs/gpu.md):
# installs the wheels `make gpu-wheels` put in .whl/ into $SITE (never the project itself: the
# node's torch is outside pyproject's range, so the checkout runs from PYTHONPATH), runs tests/gpu,
# whose fixture runs benchmarks/gpu.py once, and prints the figures' table. Everything it writes
# goes under $OUT:
#
#   env.txt       python, torch, CUDA, NCCL, nvidia-smi, the carried packages' versions
#   pip.log       the wheels' installation
#   pytest.log    tests/gpu, with junit.xml beside it
#   gpu/gpu.json  the figures (copy it to benchmarks/results/gpu-<gpu>.json to keep it)
#   gpu/benchmark.log, gpu/work/  the benchmark's own output, the studies and their trial folders
#   table.txt     the table printed at the end
#
# Exit status: pytest's (0: every test passed); 2 when the node shows no CUDA device; 1 when the
# set-up failed (the one line before it says what).
set -u -o pipefail

OUT=${OUT:?OUT must name the folder for logs and figures}
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
WHEELS=${WHEELS:-.whl}
PYTEST_TIMEOUT_S=${PYTEST_TIMEOUT_S:-480}
mkdir -p "$OUT"
started=$SECONDS

say() { printf '%s\n' "$*" | tee -a "$OUT/run.txt"; }

shopt -s nullglob
wheels=("$WHEELS"/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
    say "gpu_run: no wheels in $WHEELS: run 'make gpu-wheels' and bring .whl with the checkout"
    exit 1
fi
if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "${wheels[@]}" >"$OUT/pip.log" 2>&1; then
    say "gpu_run: installing ${#wheels[@]} wheels into $SITE failed: $(tail -1 "$OUT/pip.log")"
    exit 1
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$SITE/bin:$PATH"
export PYTHONDONTWRITEBYTECODE=1
say "gpu_run: ${#wheels[@]} wheels installed in $(( SECONDS - started )) s"

if ! "$PYTHON" - >"$OUT/env.txt" 2>&1 <<'EOF'
import importlib.metadata as m, platform, shutil, subprocess
import torch
import nccl_tune.cli, optuna, omegaconf, sqlalchemy, alembic, yaml, ahocorasick_rs, setproctitle, pytest, xdist  # noqa
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available())
if torch.cuda.is_available():
    print("nccl", ".".join(map(str, torch.cuda.nccl.version())), "device", torch.cuda.get_device_name(0))
for name in ("optuna", "omegaconf", "SQLAlchemy", "alembic", "PyYAML", "py-spy", "pytest", "nvidia-ml-py",
             "psutil", "rich", "typer", "numpy"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "missing")
print("py-spy", shutil.which("py-spy"))
if shutil.which("nvidia-smi"):
    print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
EOF
then
    say "gpu_run: the project does not import with the carried wheels: $(tail -1 "$OUT/env.txt")"
    exit 1
fi
say "gpu_run: $(head -2 "$OUT/env.txt" | tr '\n' ' ')"

NCCL_TUNE_GPU_OUT="$OUT/gpu" timeout "$PYTEST_TIMEOUT_S" "$PYTHON" -m pytest -q -p no:cacheprovider -rA \
    --junitxml "$OUT/junit.xml" tests/gpu >"$OUT/pytest.log" 2>&1
status=$?
[ $status -eq 124 ] && say "gpu_run: tests/gpu ran past ${PYTEST_TIMEOUT_S} s and was stopped"

if [ -f "$OUT/gpu/gpu.json" ]; then
    model=$("$PYTHON" -c "import json,re,sys; m=json.load(open(sys.argv[1]))['hardware']['fingerprint']['gpu_model'] or ''; print(re.sub('[^a-z0-9]+','-',m.lower()).strip('-'))" "$OUT/gpu/gpu.json")
    kept="benchmarks/results/gpu-$model.json"
    compare=()
    [ -f "$kept" ] && compare=(--compare "$kept")
    "$PYTHON" benchmarks/gpu.py --show "$OUT/gpu/gpu.json" ${compare[@]+"${compare[@]}"} >"$OUT/table.txt" 2>&1
    cat "$OUT/table.txt"
    say "gpu_run: figures in \$OUT/gpu/gpu.json; keep them as $kept"
elif grep -q "no CUDA device visible" "$OUT/pytest.log"; then
    say "gpu_run: $(grep -m1 -o 'no CUDA device visible[^:]*' "$OUT/pytest.log"): tests/gpu skipped"
    status=2
else
    say "gpu_run: no figures were written; see pytest.log"
fi
grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|(passed|failed|error|skipped)( in |,)" "$OUT/pytest.log" | tail -15
say "gpu_run: exit $status after $(( SECONDS - started )) s"
exit $status
