# ---- cli: the coconet command as a newcomer meets it ----
# `coconet help` prints the help as --help does.
group cli

# cli_status WHAT STATUS EXPECT ARGS...: `coconet ARGS` exits STATUS with
# EXPECT in its stderr (stdout for status 0)
cli_status() {
    what=$1; status=$2; expect=$3; shift 3
    coco "$@"
    out=$TMP/err
    [ "$status" -eq 0 ] && out=$TMP/out
    if [ -n "$why" ]; then bad "cli $what: $why: $(err1)"
    elif [ $rc -ne "$status" ]; then bad "cli $what: exit status $rc, expected $status ($(err1))"
    elif ! grep -F -q -- "$expect" "$out"; then
        bad "cli $what: expected '$expect', got: $(head -n 1 "$out" | cut -c 1-300)"
    else ok; fi
}

# help: the command prints what --help prints
cli_status "help" 0 "usage: coconet COMMAND FILE [options]" help
cp "$TMP/out" "$TMP/help.out"
coco --help
if cmp -s "$TMP/out" "$TMP/help.out"; then ok; else bad "cli help: not what --help prints"; fi

# a FIFO or a directory is refused at once: opening a FIFO must not wait
# for a writer (as the program, a schedule file or a CUDA source)
mkfifo "$TMP/fifo.coco"
cli_status "a FIFO as the program" 1 "fifo.coco: error: cannot read a FIFO: a regular file is expected" \
    check "$TMP/fifo.coco"
cli_status "a FIFO as a schedule file" 1 "fifo.coco: error: cannot read a FIFO" \
    check examples/adam.coco --schedule-file "$TMP/fifo.coco"
cli_status "a directory as the program" 1 "error: cannot read a directory" check "$TMP"
rm -f "$TMP/fifo.coco"
group_end
