package core

// Model samples the next token of a sequence. It must be deterministic: the
// same prompt and position give the same token, on any machine.
type Model interface {
	// Prepare returns the model's summary of a prompt, computed once per
	// request.
	Prepare(prompt []int) uint64
	// TokenAt returns the token at output position i (from 0) of a request
	// whose prompt Prepare summarised.
	TokenAt(key uint64, i int) int
}

// ToyModel is the deterministic model of llmdst. With h the 64-bit FNV-1a
// hash of the prompt's token ids (each as 4 little-endian bytes) and
// x = splitmix64(h + (i+1)·0x9E3779B97F4A7C15), the token at output
// position i is
//
//	EOS (0)                       if EOSOdds > 0 and x mod EOSOdds = 0,
//	1 + (x >> 8) mod (VocabSize−1) otherwise,
//
// so by default it never ends a sequence on its own and its tokens are
// words of the toy vocabulary.
type ToyModel struct {
	// EOSOdds makes about one token in EOSOdds the end-of-sequence token;
	// 0 means never.
	EOSOdds uint64
}

var _ Model = ToyModel{}

// Prepare implements Model.
func (ToyModel) Prepare(prompt []int) uint64 {
	h := uint64(14695981039346656037)
	for _, t := range prompt {
		for b := 0; b < 4; b++ {
			h ^= uint64(uint32(t) >> (8 * b) & 0xff)
			h *= 1099511628211
		}
	}
	return h
}

// TokenAt implements Model.
func (m ToyModel) TokenAt(key uint64, i int) int {
	x := splitmix64(key + uint64(i+1)*0x9E3779B97F4A7C15)
	if m.EOSOdds > 0 && x%m.EOSOdds == 0 {
		return EOSTokenID
	}
	return 1 + int((x>>8)%uint64(VocabSize-1))
}

// DefaultDraftMissOdds is the draft model's default: about one token in
// four is not the target's.
const DefaultDraftMissOdds = 4

// DraftModel is the draft model of speculative decoding
// (Config.NumSpeculativeTokens): it proposes the tokens Target samples,
// but about one in MissOdds another (the next token id up, never eos),
// chosen by the position and key alone, so that a run's drafts are the
// same on any machine. MissOdds 0 or 1 misses every token.
type DraftModel struct {
	Target   Model
	MissOdds uint64
}

var _ Model = DraftModel{}

// Prepare implements Model.
func (d DraftModel) Prepare(prompt []int) uint64 { return d.Target.Prepare(prompt) }

// TokenAt implements Model.
func (d DraftModel) TokenAt(key uint64, i int) int {
	t := d.Target.TokenAt(key, i)
	if d.MissOdds > 1 && splitmix64(key^uint64(i+1)*0xC2B2AE3D27D4EB4F)%d.MissOdds != 0 {
		return t
	}
	return 1 + t%(VocabSize-1)
}

// SampleAt returns the token a request samples at output position i: the
// model's, except that below MinTokens the tokens that would stop the
// request — its StopTokenIDs, and eos unless IgnoreEOS — cannot be sampled,
// as vLLM's min-tokens logits processor masks them. A masked token gives
// way to the next token id up, wrapping at VocabSize, that is not masked:
// the model's next choice. So a request never shows a stop token or eos
// before its MinTokens-th token.
func SampleAt(m Model, key uint64, i int, p *SamplingParams, eos int) int {
	t := m.TokenAt(key, i)
	if i >= p.MinTokens || !p.StopsOn(t, eos) {
		return t
	}
	for n := 1; n <= VocabSize; n++ {
		if alt := (t + n) % VocabSize; !p.StopsOn(alt, eos) {
			return alt
		}
	}
	return t // every token id stops the request: nothing can take its place
}

// Tokens returns the first n tokens the model generates for prompt,
// ignoring every stop condition.
func Tokens(m Model, prompt []int, n int) []int { return TokensFor(m, m.Prepare(prompt), n) }

// TokensFor returns the first n tokens the model generates with key: a
// prompt's (Model.Prepare), a sequence's (SequenceKey) or an adapter's
// (LoRAKey), ignoring every stop condition.
func TokensFor(m Model, key uint64, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = m.TokenAt(key, i)
	}
	return out
}

// Sampled returns the first n tokens a request with params p samples from
// the model for prompt (SampleAt), ignoring every stop condition.
func Sampled(m Model, prompt []int, n int, p *SamplingParams, eos int) []int {
	key := m.Prepare(prompt)
	out := make([]int, n)
	for i := range out {
		out[i] = SampleAt(m, key, i, p, eos)
	}
	return out
}

// SequenceKey is the key sequence index of a prompt samples with, given
// the prompt's key from Model.Prepare: the key itself for sequence 0, so
// that a request of one sequence samples as it always did, and a
// different key for each other sequence of a parallel-sampling request —
// as vLLM gives child i the seed seed+i, or a random one.
func SequenceKey(key uint64, index int) uint64 {
	if index == 0 {
		return key
	}
	return splitmix64(key ^ uint64(index)*0xD1B54A32D192ED03)
}

// LoRAKey is the key a request with LoRA adapter lora samples with, given
// the key it would sample with on the base model: the key itself for
// lora 0, so that a request without an adapter samples as it always did,
// and a different key for each adapter — an adapter's weights change
// every token, as a real one changes the logits.
func LoRAKey(key uint64, lora int) uint64 {
	if lora == 0 {
		return key
	}
	return splitmix64(key ^ uint64(lora)*0x8CB92BA72F3D8DD7)
}

// RevisionKey is the key an adapter's request samples with once the
// adapter's weights were loaded in place revision times (vLLM's
// add_lora with load_inplace), given its LoRAKey: the key itself at
// revision 0, a different key for each later revision, as new weights
// change every token.
func RevisionKey(key, revision uint64) uint64 {
	if revision == 0 {
		return key
	}
	return splitmix64(key ^ revision*0xA0761D6478BD642F)
}

// loraSalt is what adapter lora, at revision rev of its weights, mixes
// into the KV it writes and into the prefix cache's keys of its blocks: 0
// for the base model.
func loraSalt(lora int, rev uint64) uint64 {
	if lora == 0 {
		return 0
	}
	return RevisionKey(splitmix64(uint64(lora)^0x4CF5AD432745937F), rev)
}

func splitmix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
