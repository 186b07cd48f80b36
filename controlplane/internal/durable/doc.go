// Package durable keeps tollgate's config store honest: the store's epoch and version are
// watched (a store that vanished, changed or went back is reported, never obeyed or seeded),
// config writes wait for replicas, every change is snapshotted to disk, and the whole config
// is exported, diffed, imported and restored as one document (docs/durability.md).
//
// The files:
//
//   - document.go: the config document (Kind, Document, Cluster, App) and its JSON/YAML
//     encoding (Encode, Decode);
//   - export.go: Reader.Export, the whole config read out of Redis;
//   - check.go: Check, every violation of a document as a whole;
//   - diff.go: Diff, the fields two documents disagree on;
//   - apply.go: import and restore of a checked document;
//   - guard.go: the store's epoch and version watched, writes refused into a lost store;
//   - persist.go: writes that wait for replicas;
//   - backup.go: the snapshots written after every change.
package durable
