// Package versions is the version matrix: TestVersions runs the advisor's own binary (collect,
// check, apply, rollback) against a throwaway cluster of every PostgreSQL major version the
// project supports (lab.MatrixVersions), where the statistics views differ. It holds no code
// of its own; docs/versions.md says what differs per version and how it is tested.
package versions
