#!/bin/sh
# tests/fuzz/has_libfuzzer.sh [CLANG]: exit 0 when CLANG (default: clang) can
# build a libFuzzer harness with AddressSanitizer and UBSan, else 1.
cc=${1:-clang}
[ -n "$cc" ] && command -v "$cc" >/dev/null 2>&1 || exit 1
dir=$(mktemp -d "${TMPDIR:-/tmp}/coconet-probe.XXXXXX") || exit 1
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n == 0; }\n' >"$dir/probe.c"
"$cc" -fsanitize=fuzzer,address,undefined -o "$dir/probe" "$dir/probe.c" >/dev/null 2>&1
rc=$?
rm -rf "$dir"
exit $rc
