package jobs

// EncodeMetadata validates m as InsertOpts.Metadata is validated at insert (an *OptionError
// with Field "Metadata" when it breaks a bound) and returns its JSON encoding ("{}" when
// empty). For other enqueue paths that carry the same metadata (package tenurenats).
func EncodeMetadata(m map[string]string) ([]byte, error) { return encodeMetadata(m) }
