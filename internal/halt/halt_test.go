package halt

import (
	"testing"

	"simpler/internal/leakcheck"
	"simpler/kind"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func TestNilSignalNeverStops(t *testing.T) {
	var s *Signal
	s.Stop("RuntimeError: ignored")
	s.Reset()
	if s.Stopped() || s.Err("op") != nil || s.Done() != nil {
		t.Error("a nil Signal reported a stop")
	}
}

func TestStopDoneErrReset(t *testing.T) {
	var s Signal
	done := s.Done()
	if s.Stopped() || s.Err("op") != nil {
		t.Fatal("a new Signal is stopped")
	}
	select {
	case <-done:
		t.Fatal("Done closed before Stop")
	default:
	}
	s.Stop("TimeoutError: past its deadline of 1s")
	s.Stop("RuntimeError: run 1 cancelled") // only the first counts
	<-done
	<-s.Done()
	if err := s.Err("comm.wait"); kind.Of(err) != kind.TimeoutError || err.Error() != "TimeoutError: comm.wait: stopped: past its deadline of 1s" {
		t.Errorf("Err = %v", err)
	}
	s.Reset()
	if s.Stopped() || s.Err("op") != nil {
		t.Error("Reset kept the stop")
	}
	select {
	case <-s.Done():
		t.Error("Done after Reset is closed")
	default:
	}
	s.Stop("no kind here")
	if err := s.Err("matmul"); kind.Of(err) != kind.RuntimeError || err.Error() != "RuntimeError: matmul: stopped: no kind here" {
		t.Errorf("Err of a reason without a kind = %v", err)
	}
}

// threadLocals stands for a Starlark thread.
type threadLocals map[string]any

func (l threadLocals) Local(k string) any       { return l[k] }
func (l threadLocals) SetLocal(k string, v any) { l[k] = v }

func TestBindOf(t *testing.T) {
	th := threadLocals{}
	if Of(th) != nil || Of(nil) != nil {
		t.Error("an unbound thread has a Signal")
	}
	s := new(Signal)
	Bind(th, s)
	if Of(th) != s {
		t.Error("Of does not find the bound Signal")
	}
}
