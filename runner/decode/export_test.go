package decode

// The strict parsers and the fast paths, for the equivalence tests.

func ParseFenceStrict(content []byte) (Fence, error) { return parseFenceStrict(content) }

func ParseFenceFast(content []byte) (Fence, bool) { return parseFenceFast(content) }

func ParseActivationStrict(content []byte) (Activation, error) {
	return parseActivationStrict(content)
}

func ParseActivationFast(content []byte) (Activation, bool) { return parseActivationFast(content) }
