package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRenderRewritesTheBlockOfARunMark(t *testing.T) {
	doc := "text\n<!-- run: echo hello; exit 1 -->\n```\nstale output\n```\nafter\n"
	out, err := render(doc)
	require.NoError(t, err)
	assert.Regexp(t, "^text\n<!-- run: echo hello; exit 1 -->\n```\n\\$ echo hello; exit 1\nhello\n\\[exit 1, wall [0-9.]+s\\]\n```\nafter\n$", out)
}

func TestRenderStopsAtASetupThatFails(t *testing.T) {
	// A setup builds what the documented commands run: when it fails, they
	// would print the output of an old build, or of nothing at all.
	doc := "<!-- setup: echo building; exit 3 -->\n<!-- run: echo hello -->\n```\nold\n```\n"
	_, err := render(doc)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 1: setup")
	assert.Contains(t, err.Error(), "exit 3")
	assert.Contains(t, err.Error(), "building", "the setup's output says why it failed")

	out, err := render("<!-- setup: true -->\nplain\n")
	require.NoError(t, err)
	assert.Equal(t, "<!-- setup: true -->\nplain\n", out)
}
