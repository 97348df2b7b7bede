# ---- shell: every shell script passes shellcheck ----
# The tracked scripts (git ls-files: *.sh and .ci/run; without .git, the
# same found with find) checked together as POSIX sh, so that a sourced file
# is read with its sourcer (tests/groups/*.sh with tests/run.sh,
# tests/gpu/faults.sh with tests/gpu/run.sh): a file with a finding fails,
# with its first. A finding the code means (words split on purpose, say) is
# disabled on its command, with its reason:
#   # shellcheck disable=SC2086 # the options' words
# Skipped where shellcheck is not installed (.ci/run installs it).
# shellcheck shell=sh # sourced by tests/run.sh
group shell
if command -v shellcheck >/dev/null 2>&1; then
    if [ -e .git ] && git ls-files '*.sh' .ci/run >"$TMP/shell.files" 2>/dev/null; then :
    else
        find . \( -name .git -o -name build -o -name ab-old -o -name '*.egg-info' \) -prune -o \
            -type f \( -name '*.sh' -o -path ./.ci/run \) -print | sed 's|^\./||' | sort >"$TMP/shell.files"
    fi
    set --
    while IFS= read -r f; do
        [ -f "$f" ] && set -- "$@" "$f"
    done <"$TMP/shell.files"
    timeout 300 shellcheck -s sh -f gcc "$@" >"$TMP/shell.out" 2>"$TMP/err"
    rc=$?
    if [ $# -eq 0 ]; then bad "shell: no shell script found"
    elif [ $rc -gt 1 ]; then bad "shell: shellcheck exited with status $rc: $(err1)"
    else
        shell_bad=0
        for f in "$@"; do
            first=$(awk -v f="$f:" 'index($0, f) == 1 { print; exit }' "$TMP/shell.out")
            if [ -n "$first" ]; then bad "shell: $first"; shell_bad=$((shell_bad + 1)); else ok; fi
        done
        if [ $rc -ne 0 ] && [ $shell_bad -eq 0 ]; then
            bad "shell: shellcheck exited with status $rc, naming no file: $(head -n 1 "$TMP/shell.out")"
        fi
        [ $rc -eq 0 ] || echo "  all the findings: shellcheck -s sh \$(git ls-files '*.sh') .ci/run"
    fi
    group_end
else
    group_end "skipped: shellcheck is not installed"
fi
