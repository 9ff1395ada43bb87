package order

import (
	"context"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// UpdateMetadata implements orderly.MetadataService: patch applied under the row's lock,
// so two concurrent patches of one object never lose each other's keys.
func (s *Service) UpdateMetadata(ctx context.Context, of orderly.MetadataOf, id string, patch orderly.MetadataPatch) (orderly.Metadata, error) {
	if !ValidID(id) {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "%s %s not found", of, id)
	}
	var out orderly.Metadata
	err := s.cfg.Store.InTx(ctx, func(tx store.Tx) error {
		m, err := tx.MetadataLock(ctx, of, id)
		if err != nil {
			return err
		}
		if out, err = m.Apply(patch); err != nil {
			return err
		}
		return tx.MetadataSet(ctx, of, id, out)
	})
	return out, err
}
