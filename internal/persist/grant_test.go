package persist

// grant records grants the way the lock manager does: each token reserved
// (synced), then confirmed. Like a batch, it writes nothing if any grant is
// invalid.
func grant(s *Store, grants ...Grant) error {
	for _, g := range grants {
		if err := s.check(g); err != nil {
			return err
		}
	}
	if err := s.usable(); err != nil {
		return err
	}
	for _, g := range grants {
		if err := s.Reserve(g.Resource, g.Token); err != nil {
			return err
		}
		if err := s.Confirm(g); err != nil {
			return err
		}
	}
	return nil
}
