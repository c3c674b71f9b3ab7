package unique

// SendReceipt mails one receipt per order, however often checkout enqueues it.
//
//tenure:job kind=send_receipt queue=mail unique=order_id unique_states=succeeded max_snoozes=5
type SendReceipt struct {
	OrderID int64  `json:"order_id"`
	Email   string `json:"email"`
}

// Digest runs at most once per hour per user and queue.
//
//tenure:job kind=digest unique=args unique_by_queue=true unique_period=1h unique_states=succeeded|dead
type Digest struct {
	UserID int64
}

// Rebuild has at most one live job.
//
//tenure:job kind=rebuild unique=kind
type Rebuild struct{}

// Thumbnail keeps no row once it succeeded; a dead job still holds its key.
//
//tenure:job kind=thumbnail delete_on_success=true unique=args unique_states=dead
type Thumbnail struct {
	ImageID int64 `json:"image_id"`
}
