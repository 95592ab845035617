# Shared by the fake condor_* commands. The pool lives in $FAKECONDOR_STATE:
#   machines        one "name cpus memory_mb [drained|owner]" per line
#   jobs/C.P        one job: key=value lines (status owner cpus memory prio
#                   qdate start host tag lifetime batch universe periodic_remove)
#   next            next cluster id
#   clock           the pool's clock (Unix seconds); absent = date +%s
#   mode, mode.CMD  ok | unreachable | malformed | hang | fail (per command)
#   calls.log       every invocation, one line each
#   submitted/C.sub the submit description of cluster C
# Output mimics HTCondor's: see ../README.md for the sources.

set -u
S="${FAKECONDOR_STATE:-}"
CMD="$(basename "$0")"

if [ -z "$S" ] || [ ! -d "$S" ]; then
	echo "Error: Couldn't contact the condor_collector on fakecondor.invalid." >&2
	exit 1
fi
echo "$CMD $*" >>"$S/calls.log"
mkdir -p "$S/jobs" "$S/submitted"

mode() {
	if [ -f "$S/mode.$CMD" ]; then cat "$S/mode.$CMD"
	elif [ -f "$S/mode" ]; then cat "$S/mode"
	else echo ok; fi
}

now() {
	if [ -f "$S/clock" ]; then cat "$S/clock"; else date +%s; fi
}

# jload FILE: read a job into the associative array J (no forks: the
# fake must stay fast). jget FILE KEY reads one value.
declare -A J
jload() {
	J=()
	local k v
	while IFS='=' read -r k v; do
		[ -n "$k" ] && [ -z "${J[$k]+x}" ] && J[$k]="$v"
	done <"$1"
}
jget() { jload "$1"; printf '%s' "${J[$2]:-}"; }

# jobs_sorted: job ids in cluster.proc order.
jobs_sorted() {
	local f
	for f in "$S"/jobs/*; do
		f="${f##*/}"
		[[ "$f" =~ ^[0-9]+\.[0-9]+$ ]] && echo "$f"
	done | sort -t. -k1,1n -k2,2n
}

# jset FILE KEY VALUE: replace atomically, so concurrent readers never see
# half a file.
jset() {
	local tmp="$1.tmp.$$"
	grep -v "^$2=" "$1" >"$tmp" || true
	printf '%s=%s\n' "$2" "$3" >>"$tmp"
	mv "$tmp" "$1"
}

# jstr S: S as a JSON string body (backslash and double quote escaped).
jstr() { local v="${1//\\/\\\\}"; printf '%s' "${v//\"/\\\"}"; }

lock() { exec 9>"$S/lock"; flock 9; }

# Real failure texts (HTCondor's sources: condor_utils and condor_submit).
unreachable_schedd() {
	case "$CMD" in
	condor_submit)
		printf '\nERROR: Failed to connect to local queue manager\nCEDAR:6001:Failed to connect to <127.0.0.1:9618?addrs=127.0.0.1-9618&noUDP&sock=schedd_1_2>\n' >&2 ;;
	condor_q)
		printf -- '-- Failed to fetch ads from: <127.0.0.1:9618?addrs=127.0.0.1-9618&noUDP&sock=schedd_1_2> : fakecondor\nCEDAR:6001:Failed to connect to <127.0.0.1:9618?addrs=127.0.0.1-9618&noUDP&sock=schedd_1_2>\n' >&2 ;;
	condor_rm)
		printf "Can't find address of local schedd\n" >&2 ;;
	*)
		printf "Error: Couldn't contact the condor_collector on 127.0.0.1:9618.\n" >&2 ;;
	esac
	exit 1
}

common_modes() {
	case "$(mode)" in
	unreachable) unreachable_schedd ;;
	hang) sleep 30; exit 1 ;;
	fail) echo "ERROR: fake failure" >&2; exit 1 ;;
	verbose) # a failure that prints a page of output
		for i in $(seq 100); do echo "-- line $i of a long answer that goes on and on and on"; done
		echo "ERROR: fake failure after a page of output" >&2; exit 1 ;;
	killed) cat >/dev/null; kill -9 $$ ;;
	esac
}

# want_format ARGS...: "json" or "long".
want_format() {
	for a in "$@"; do
		case "$a" in -long|-l) echo long; return ;; esac
	done
	echo json
}

# ad_begin/ad_attr/ad_end print one ad in the chosen format. ad_attr TYPE
# NAME VALUE with TYPE int, str, bool or expr.
FIRST_AD=1
ads_open() { [ "$FORMAT" = json ] && AD_COUNT=0; :; }
ad_begin() {
	FIRST_ATTR=1
	if [ "$FORMAT" = json ]; then
		if [ "$FIRST_AD" = 1 ]; then printf '[\n{\n'; else printf ',\n{\n'; fi
	fi
	FIRST_AD=0
}
ad_attr() {
	local t="$1" n="$2" v="$3"
	if [ "$FORMAT" = json ]; then
		[ "$FIRST_ATTR" = 1 ] || printf ',\n'
		case "$t" in
		str) printf '  "%s": "%s"' "$n" "$(jstr "$v")" ;;
		expr) printf '  "%s": "\\/Expr(%s)\\/"' "$n" "$(jstr "$v")" ;;
		*) printf '  "%s": %s' "$n" "$v" ;;
		esac
	else
		case "$t" in
		str) printf '%s = "%s"\n' "$n" "$(jstr "$v")" ;;
		*) printf '%s = %s\n' "$n" "$v" ;;
		esac
	fi
	FIRST_ATTR=0
}
ad_end() {
	if [ "$FORMAT" = json ]; then printf '\n}\n'; else printf '\n'; fi
}
ads_close() {
	if [ "$FORMAT" = json ] && [ "$FIRST_AD" = 0 ]; then printf ']\n'; fi
}
