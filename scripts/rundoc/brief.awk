# brief.awk: fold the number arrays of indented JSON onto one line, keeping
# the first 5 numbers of a long one ("[1, 3, 4, 5, 6, …]"), so that a
# -json summary reads at a glance in a document.
function flush(   i, s, n) {
	n = (cnt > 8) ? 5 : cnt
	s = head "["
	for (i = 1; i <= n; i++) s = s (i > 1 ? ", " : "") items[i]
	if (cnt > n) s = s ", …"
	print s "]" tail
	inarr = 0
}
inarr && /^[ \t]*-?[0-9.eE+-]+,?$/ { v = $0; gsub(/[ \t,]/, "", v); items[++cnt] = v; next }
inarr && /^[ \t]*\],?$/ { tail = ($0 ~ /,$/) ? "," : ""; flush(); next }
inarr { print head "["; for (i = 1; i <= cnt; i++) print "    " items[i] (i < cnt ? "," : ""); inarr = 0 }
/\[$/ { head = substr($0, 1, length($0) - 1); cnt = 0; inarr = 1; next }
{ print }
