# The timing line of `make run` (Makefile): setup/run wall seconds from -v a, b, c, the exit code from -v rc, and
# the pipeline's CPU seconds: the children's user + system time of the shell's `times` (second line, "XmY.YYYs
# XmY.YYYs") after the pipeline minus before it (first file: before, second: after).
function seconds(t,    p) { split(t, p, "m"); sub(/s$/, "", p[2]); return p[1] * 60 + p[2] }
FNR == 2 { cpu[FILENAME == ARGV[1] ? 0 : 1] = seconds($1) + seconds($2) }
END { printf "setup %.1f run %.1f cpu %.1f rc %d\n", b - a, c - b, cpu[1] - cpu[0], rc }
