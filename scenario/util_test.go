package scenario_test

import (
	"errors"
	"strconv"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
