package tenurenats

// SetRelayHooks installs the kill tests' stopping points on a relay configuration.
func SetRelayHooks(c *RelayConfig, afterPublish, afterAck, beforeCommit func(ids []int64)) {
	c.hooks = relayHooks{afterPublish: afterPublish, afterAck: afterAck, beforeCommit: beforeCommit}
}
