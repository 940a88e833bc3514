#!/bin/sh
# Runs every fuzz target of every package in the module (or of the
# packages given as arguments) for $FUZZTIME each: `make fuzz` and, with a
# fixed number of inputs, `make test` call it. Each target's output goes
# to a temporary file of its own, printed when the target fails and
# removed either way. A package that does not build fails the run: a fuzz
# target that cannot be listed must not be skipped without a word.
set -eu

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

log=
trap 'rm -f "$log"' EXIT
trap 'rm -f "$log"; exit 130' INT TERM

if [ $# -eq 0 ]; then
	set -- ./...
fi
pkgs=$("$GO" list "$@")

for pkg in $pkgs; do
	log=$(mktemp)
	if ! "$GO" test -list '^Fuzz' "$pkg" >"$log" 2>&1; then
		echo "fuzz: cannot list the fuzz targets of $pkg:"
		cat "$log"
		exit 1
	fi
	targets=$(grep '^Fuzz' "$log" || true)
	rm -f "$log"
	for f in $targets; do
		echo "fuzz $pkg $f ($FUZZTIME)"
		log=$(mktemp)
		if ! "$GO" test "$pkg" -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" >"$log" 2>&1; then
			cat "$log"
			exit 1
		fi
		rm -f "$log"
	done
done
