#!/bin/sh
# Runs every fuzz target of every package in the module (or of the
# packages given as arguments) for $FUZZTIME each: `make fuzz` and, with a
# fixed number of inputs, `make test` call it. The targets are found in
# each package's test files (a `func FuzzX(f *testing.F)`), which needs no
# build; a target that does not build fails its run. Each target's output
# goes to a temporary file of its own, printed when the target fails and
# removed either way.
set -eu

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}

log=
trap 'rm -f "$log"' EXIT
trap 'rm -f "$log"; exit 130' INT TERM

if [ $# -eq 0 ]; then
	set -- ./...
fi

pkgs=$("$GO" list -f '{{.ImportPath}} {{.Dir}}' "$@")
echo "$pkgs" | while read -r pkg dir; do
	targets=$(cat "$dir"/*_test.go 2>/dev/null | sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(f \*testing\.F).*/\1/p')
	for f in $targets; do
		echo "fuzz $pkg $f ($FUZZTIME)"
		log=$(mktemp)
		if ! "$GO" test "$pkg" -run '^$' -fuzz "^$f\$" -fuzztime "$FUZZTIME" >"$log" 2>&1; then
			cat "$log"
			rm -f "$log"
			exit 1
		fi
		rm -f "$log"
	done
done
