package saga

// JoinWaiting returns how many Runs wait for a joined transaction (Config.JoinRuns).
func (o *Orchestrator) JoinWaiting() int {
	o.joiner.mu.Lock()
	defer o.joiner.mu.Unlock()
	return len(o.joiner.waiting)
}
