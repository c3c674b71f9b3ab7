package multifile

import "encoding/json"

type (
	// Alpha is in a type group.
	//
	//tenure:job kind=alpha version=2 priority=1
	Alpha struct {
		N uint16 `json:"n" tenure:"oneof=1|2|65535"`
		P *[]int `json:"p" tenure:"required,max=3"`
	}

	// notAJob sits in the same group.
	notAJob struct{}
)

//tenure:upgrade kind=alpha from=1
func alphaV1(old json.RawMessage) (json.RawMessage, error) { return old, nil }
