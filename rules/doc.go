// Package rules turns a history of collector snapshots and the latest probe report into
// findings an operator can act on: what is wrong, the evidence behind it (named figures with
// units), the value to set, how it is applied, and what it should change.
//
// Every rule is a pure function of its Input: no database, no network, no file system and no
// clock (time comes from Input.Now), so that each one is tested from a table of synthetic
// histories. A rule that lacks the data to judge says what is missing instead of guessing.
// The Tracker adds the noise control that a single evaluation cannot: a measured warning shows
// only after it has held for a while, and clears only after it has been gone for a while.
// Evaluate is the one way in: it runs the rules, the Tracker and the resolver for the daemon and
// for check alike. Each rule reads as a decision: it gathers its facts, decides on them against
// the Thresholds, and builds the finding.
//
// Rule IDs are a contract: alert rules, dashboards and docs/rules.md refer to them.
package rules
