package daemon

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// LevelCore lets a reload lower the level below what the root logger was built with.
func TestLevelCore(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	level := zap.NewAtomicLevelAt(zapcore.WarnLevel)
	logger := zap.New(core).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return LevelCore{Core: c, Level: level} }))
	logger.Info("hidden")
	level.SetLevel(zapcore.DebugLevel)
	logger.With(zap.String("k", "v")).Debug("shown")
	if got := logs.All(); len(got) != 1 || got[0].Message != "shown" {
		t.Errorf("logged %v, want only the debug entry after lowering the level", got)
	}
}
