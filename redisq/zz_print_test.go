package redisq
import ("testing";"context")
func TestZZPrint(t *testing.T){ _, err := New(context.Background(), Config{URL:"redis://:pw@127.0.0.1:1/0"}); t.Log(err); _, err = New(context.Background(), Config{URL:"redis://u:pw@127.0.0.1:6379/%zz"}); t.Log(err)}
