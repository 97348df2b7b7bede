# ---- the Python package's CPU part (python/coconet) ----
# tests/python/*.py under pytest, against build/libcoconet.so and the
# coconet command: loading, schedules, run_cpu on every example and oracle
# program (each output's hash equal to `coconet run`'s), NumPy inputs, new
# values of Updated tensors, and errors raised with their positions; and the
# GPU path's torch-free layers (tests/python/test_session.py): the ctypes
# session layer against the stand-in runtime (build/fake/libfake_rt.so, when
# built with nvcc), argument checks and their messages, the NCCL choice, and
# coconet.torch's optimizer and layer programs against NumPy's formulas;
# the public API's type hints, and mypy over the package where mypy is
# installed (tests/requirements.txt has it; without it that test skips).
# shellcheck shell=sh # sourced by tests/run.sh
group python
if ! $PYTHON -c 'import numpy, pytest, mypy' 2>/dev/null; then
    $PYTHON -m pip install --quiet -r tests/requirements.txt >"$TMP/pip.out" 2>&1 ||
        PIP_BREAK_SYSTEM_PACKAGES=1 $PYTHON -m pip install --quiet -r tests/requirements.txt \
            >"$TMP/pip.out" 2>&1
fi
if ! $PYTHON -c 'import numpy, pytest' 2>/dev/null; then
    bad "python: $PYTHON with numpy and pytest is not available (pip install -r tests/requirements.txt)"
elif [ ! -f build/libcoconet.so ]; then
    bad "python: build/libcoconet.so was not built (make build/libcoconet.so)"
else
    # shellcheck disable=SC2086 # $PYTHON's words, as on the lines above
    PYTHONPATH=python COCONET_LIB=build/libcoconet.so timeout 600 $PYTHON -m pytest -q -p no:cacheprovider \
        tests/python >"$TMP/pytest.out" 2>&1
    rc=$?
    n=$(sed -n 's/.* \([0-9][0-9]*\) passed.*/\1/p; s/^\([0-9][0-9]*\) passed.*/\1/p' "$TMP/pytest.out" | tail -n 1)
    pass=$((pass + ${n:-0}))
    if [ $rc -ne 0 ]; then
        bad "python: pytest tests/python exited with status $rc:"
        grep -E '^(FAILED|ERROR|E )' "$TMP/pytest.out" | head -n 20 | sed 's/^/  /'
    fi
fi
group_end
