package core

import (
	"strings"
)

// EOSTokenID is the end-of-sequence token of the toy vocabulary. It decodes
// to nothing, as a special token does.
const EOSTokenID = 0

// vocabWords are the words of the toy vocabulary, token 1 onwards.
const vocabWords = "" +
	"the of and to in is it you that he was for on are with as his they be at one have this " +
	"from or had by hot word but what some we can out other were all there when up use your how " +
	"said an each she which do their time if will way about many then them write would like so " +
	"these her long make thing see him two has look more day could go come did number sound no " +
	"most people my over know water than call first who may down side been now find any new " +
	"work part take get place made live where after back little only round man year came show " +
	"every good me give our under name very through just form sentence great think say help low " +
	"line differ turn cause much mean before move right boy old too same tell does set three " +
	"want air well also play small end put home read hand port large spell add even land here " +
	"must big high such follow act why ask men change went light kind off need house picture " +
	"try us again animal point mother world near build self earth father head stand own page " +
	"should country found answer school grow study still learn plant cover food sun four " +
	"between state keep eye never last let thought city tree cross farm hard start might story " +
	"saw far sea draw left late run while press close night real life few north open seem " +
	"together next white children begin got walk example ease paper group always music those " +
	"both mark often letter until mile river car feet care second book carry took science eat " +
	"room friend began idea fish mountain stop once base hear horse cut sure watch color face " +
	"wood main enough plain girl usual young ready above ever red list though feel talk bird " +
	"soon body dog family direct pose leave song measure door product black short numeral class " +
	"wind question happen complete ship area half rock order fire south problem piece told knew " +
	"pass since top whole king space heard best hour better true during hundred five remember " +
	"step early hold west ground interest reach fast verb sing listen six table travel less " +
	"morning ten simple several vowel toward war lay against pattern slow center love person " +
	"money serve appear road map rain rule govern pull cold notice voice unit power town fine " +
	"certain fly fall lead cry dark machine note wait plan figure star box noun field rest " +
	"correct able pound done beauty drive stood contain front teach week final gave green quick " +
	"develop ocean warm free minute strong special mind behind clear tail produce fact street " +
	"inch multiply nothing course stay wheel full force blue object decide surface deep moon " +
	"island foot system busy test record boat common gold possible plane stead dry wonder laugh " +
	"thousand ago ran check game shape equate miss brought heat snow tire bring yes distant " +
	"fill east paint language among hello"

var (
	vocab   = append([]string{"</s>"}, strings.Fields(vocabWords)...)
	wordIDs = func() map[string]int {
		m := make(map[string]int, len(vocab))
		for id, w := range vocab {
			m[w] = id
		}
		return m
	}()
	// pieces are the decoded forms of the tokens: a space and the word, as
	// a sentencepiece tokenizer decodes a word-initial token.
	pieces = func() []string {
		p := make([]string, len(vocab))
		for id, w := range vocab[1:] {
			p[id+1] = " " + w
		}
		return p
	}()
)

// VocabSize is the number of tokens of the toy vocabulary, EOS included.
var VocabSize = len(vocab)

// Tokenizer is the toy tokenizer: one token per word of its vocabulary, so
// generated text reads as words. Encode maps a word outside the vocabulary
// to a vocabulary word by hashing it, so any text encodes.
type Tokenizer struct{}

// Encode returns the tokens of text, one per space-separated word.
func (Tokenizer) Encode(text string) []int {
	fields := strings.Fields(text)
	ids := make([]int, 0, len(fields))
	for _, f := range fields {
		id, ok := wordIDs[strings.ToLower(f)]
		if !ok || id == EOSTokenID {
			h := uint32(2166136261)
			for i := 0; i < len(f); i++ {
				h = (h ^ uint32(f[i])) * 16777619
			}
			id = 1 + int(h%uint32(VocabSize-1))
		}
		ids = append(ids, id)
	}
	return ids
}

// Piece returns the text of one token: a space and its word, or "" for EOS
// and ids outside the vocabulary.
func (Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(pieces) {
		return ""
	}
	return pieces[id]
}

// Decode returns the text of tokens: the concatenation of their pieces.
func (t Tokenizer) Decode(ids []int) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(t.Piece(id))
	}
	return b.String()
}
