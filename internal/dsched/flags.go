package dsched

import (
	"strconv"

	"simpler/kind"
)

// ErrUsage is what the errors of ParseSeed and ParsePositive wrap: the
// command line is wrong, which the CLI reports with exit status 2.
var ErrUsage = kind.New(kind.ValueError, "usage")

// ParseSeed parses --seed's value: a decimal integer in [0, 2^64).
func ParseSeed(s string) (uint64, error) {
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usage("--seed", s, "want a non-negative integer below 2^64")
	}
	return seed, nil
}

// ParsePositive parses the value of flag (named with its dashes, as
// "--explore"): a decimal integer of 1 or more.
func ParsePositive(flag, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usage(flag, s, "want an integer of 1 or more")
	}
	return n, nil
}

func usage(flag, value, want string) error {
	return &kind.Error{
		Kind:  kind.ValueError,
		Msg:   flag + " " + strconv.Quote(value) + ": " + want,
		Cause: ErrUsage,
	}
}
