# ---- pip install ./python into a fresh virtual environment ----
# The CPU package (COCONET_GPU=0, also where nvcc and torch are) builds and
# installs offline (--no-build-isolation --no-index) into a fresh venv that
# sees the system's packages (NumPy, setuptools). Then, from outside the
# checkout and with no COCONET_* variable: coconet imports from the venv
# and runs a program on the CPU, with its py.typed marker (PEP 561); the GPU path says it is not installed and
# how to install it; `python -m coconet.check` says there is no GPU and
# exits 0. setuptools before 70.1 builds no wheel without the wheel package:
# the venv then gets a newer setuptools from the index, or the group skips.
# shellcheck shell=sh # sourced by tests/run.sh
group pip
V=$TMP/pipvenv
pip_skip=
if ! $PYTHON -m venv --system-site-packages "$V" >"$TMP/venv.out" 2>&1; then
    pip_skip="no venv module ($(head -n 1 "$TMP/venv.out"))"
elif ! "$V/bin/python" -c 'import setuptools.command.bdist_wheel' 2>/dev/null &&
     ! "$V/bin/python" -c 'import wheel' 2>/dev/null &&
     ! timeout 120 "$V/bin/python" -m pip install --quiet 'setuptools>=70.1' >"$TMP/venv.out" 2>&1; then
    pip_skip="setuptools builds no wheel here and a newer one could not be installed"
fi
if [ -n "$pip_skip" ]; then
    group_end "skipped: $pip_skip"
else
    if env -u COCONET_HOME -u COCONET_LIB COCONET_GPU=0 timeout 300 "$V/bin/python" -m pip install \
           --no-build-isolation --no-index ./python >"$TMP/pip.out" 2>&1; then ok
    else bad "pip: pip install ./python failed:"; tail -n 15 "$TMP/pip.out" | sed 's/^/  /'; fi
    pip_root=$PWD
    cd "$TMP" || exit 2
    pip_env="env -u COCONET_HOME -u COCONET_LIB -u COCONET_CUDA_RUNTIME -u PYTHONPATH"
    if $pip_env "$V/bin/python" -c '
import os, sys, coconet
assert coconet.__file__.startswith(sys.prefix), coconet.__file__
p = coconet.load(os.path.join(sys.argv[1], "examples", "adam.coco"), sizes={"N": 64}, ranks=2)
print(sorted(p.run_cpu({"lr": 0.01, "t": 1.0})))' "$pip_root" >"$TMP/out" 2>&1 &&
        grep -q "p_" "$TMP/out"; then ok
    else bad "pip: the installed package does not run a program:"; tail -n 5 "$TMP/out"; fi
    if $pip_env "$V/bin/python" -c '
import os, coconet
assert os.path.isfile(os.path.join(os.path.dirname(coconet.__file__), "py.typed"))' \
        >"$TMP/out" 2>&1; then ok
    else bad "pip: the installed package lacks its py.typed marker:"; tail -n 3 "$TMP/out"; fi
    $pip_env "$V/bin/python" -c 'from coconet import _session as S; S.runtime_path()' >"$TMP/out" 2>&1
    if grep -q "GPU path is not installed.*pip install --no-build-isolation ./python" "$TMP/out"; then ok
    else bad "pip: a CPU install's GPU path does not say how to install it:"; tail -n 3 "$TMP/out"; fi
    if [ -z "$(nvidia-smi -L 2>/dev/null)" ]; then
        $pip_env "$V/bin/python" -m coconet.check >"$TMP/out" 2>&1
        rc=$?
        if [ $rc -eq 0 ] && grep -q "^GPU: *none seen" "$TMP/out" && grep -q "^result: *no GPU" "$TMP/out" &&
            grep -q "^GPU runtime: *MISSING" "$TMP/out" && grep -q "fix: pip install" "$TMP/out"; then ok
        else bad "pip: python -m coconet.check without a GPU (status $rc):"; sed 's/^/  /' "$TMP/out"; fi
    fi
    cd "$pip_root" || exit 2
    group_end
fi
