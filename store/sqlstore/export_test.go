package sqlstore

// SetSentHook makes f see the text of every statement db's transactions send (DB.sent).
// Call it before db is used.
func (db *DB) SetSentHook(f func(text string)) { db.sent = f }

// MigrateLockID and MigrateLockName name the lock that Open's migrations take on
// PostgreSQL (of a schema) and MySQL (of a database).
var (
	MigrateLockID   = migrateLockID
	MigrateLockName = migrateLockName
)

// waiters returns how many transactions wait for key's gate: its callers but the holder
// (one taking or giving it back counts for a moment too).
func (g *rowGates) waiters(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt := g.gates[key]; gt != nil {
		return gt.refs - len(gt.ch)
	}
	return 0
}
