package order

// CreateWaiters returns how many creates of sku wait for a batch (batch.go).
func (s *Service) CreateWaiters(sku string) int { return s.batch.waiters(sku) }
