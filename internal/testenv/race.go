//go:build race

package testenv

// raceEnabled says the test binary was built with -race: its code runs several times slower.
const raceEnabled = true
