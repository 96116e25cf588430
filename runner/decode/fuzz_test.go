package decode_test

import (
	"testing"

	"github.com/synchro/synchro/runner/decode"
)

// FuzzParseMessages: the Synchro message parsers never panic and fail only
// with message_format.
func FuzzParseMessages(f *testing.F) {
	f.Add([]byte(`{"v":2,"generation":2,"previous":1,"mac":"0123456789abcdef0123456789abcdef"}`))
	f.Add([]byte(realCompact["real_synced_update"]))
	f.Add([]byte(`{"v":2,"kind":"capture_dependency","relation_id":3,"schema":"s","table":"t","op":"delete","old_key":"k","new_key":null,"version":"x","fence_id":"` + fid + `","ordinal":1,"capture_key":"k","mac":"0123456789abcdef0123456789abcdef"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := decode.ParseFence(data); err != nil {
			if c, _ := decode.ClassOf(err); c != decode.ClassMessageFormat {
				t.Fatal(err)
			}
		}
		if _, err := decode.ParseRegistryActivation(data); err != nil {
			if c, _ := decode.ClassOf(err); c != decode.ClassMessageFormat {
				t.Fatal(err)
			}
		}
	})
}
