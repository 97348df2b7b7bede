# bench/mp_rows.awk: the variants of one `coconet run --backend cuda` table
# as bench/mp.sh's raw rows, layer|B|S|H|K|P|G|dtype|variant|ms|check|notation.
#   awk -v pre='mlp|8|1024|3072|12288|4|4' -v dtype=fp16 -f bench/mp_rows.awk OUTPUT
# pre: the row's layer|B|S|H|K|P|G. A table row is
#   NAME VERDICT MAX-ABS MAX-REL DIFFERING/ELEMENTS OUTSIDE TIME ms [NOTATION]
# (with --reference none the numbers are '-'); its time is the field before
# "ms", its notation what follows, less " (paper: ...)"; the program and the
# file's own schedules, which have none, are written by their names.
/^schedule +outputs/ { on = 1; next }
/^gpu-(time|checks):/ { on = 0 }
on && NF >= 8 {
    i = 3
    while (i <= NF && $i != "ms") i++
    if (i > NF) next
    note = ""
    for (j = i + 1; j <= NF; j++) note = note (note == "" ? "" : " ") $j
    sub(/ \(paper: .*$/, "", note)
    if (note == "") note = $1
    print pre "|" dtype "|" $1 "|" $(i - 1) "|" $2 "|" note
}
