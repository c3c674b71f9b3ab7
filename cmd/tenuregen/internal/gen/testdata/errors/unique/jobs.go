package unique

//tenure:job kind=a unique=order
type MissingField struct {
	OrderID int64 `json:"order_id"`
}

//tenure:job kind=b unique=note
type OmitEmpty struct {
	Note string `json:"note,omitempty"`
}

//tenure:job kind=c unique_period=1h
type PeriodWithoutUnique struct{}

//tenure:job kind=d unique=kind unique_states=ready unique_period=1ms unique_by_queue=maybe max_snoozes=0
type BadValues struct{}

//tenure:job kind=e unique=args unique_states=dead|succeeded delete_on_success=true
type DeleteKeepsKey struct{}

//tenure:job kind=f delete_on_success=yes
type DeleteNotBool struct{}
