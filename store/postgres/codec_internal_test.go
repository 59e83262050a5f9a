package postgres

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// The store's bytea[] encoding is byte for byte pgx's own, for every shape
// of [][]byte: NULL, empty, NULL and empty elements, and large ones; and a
// connection's map with it installed still encodes other types, and decodes
// bytea[], as pgx does.
func TestByteaArraysEncodeAsPgxDoes(t *testing.T) {
	big := bytes.Repeat([]byte{0, 0xff, 'x'}, 100_000)
	many := make([][]byte, 1000)
	for i := range many {
		many[i] = []byte{byte(i), byte(i >> 8)}
	}
	pgxMap := pgtype.NewMap()
	ours := pgtype.NewMap()
	orig, ok := ours.TypeForOID(pgtype.ByteaArrayOID)
	require.True(t, ok)
	ours.RegisterType(&pgtype.Type{Name: orig.Name, OID: orig.OID, Codec: byteaArrays{orig.Codec}})

	for name, v := range map[string][][]byte{
		"nil":                 nil,
		"empty":               {},
		"one empty element":   {{}},
		"one NULL element":    {nil},
		"mixed":               {[]byte("k1"), nil, {}, {0, 1, 2, 3}, big},
		"a thousand elements": many,
	} {
		want, err := pgxMap.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, v, nil)
		require.NoError(t, err, name)
		got, err := ours.Encode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, v, []byte("prefix"))
		require.NoError(t, err, name)
		if want == nil {
			require.Nil(t, got, "%s: NULL", name)
			continue
		}
		require.Equal(t, append([]byte("prefix"), want...), got, name)

		var back [][]byte
		require.NoError(t, ours.Scan(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, want, &back), name)
		require.Equal(t, len(v), len(back), name)
		for i := range v {
			require.Equal(t, v[i] == nil, back[i] == nil, "%s: element %d NULL", name, i)
			require.True(t, bytes.Equal(v[i], back[i]), "%s: element %d", name, i)
		}
	}

	// Other values bound to bytea[], and the text format, are pgx's.
	for _, v := range []any{[]string{"a", "b"}, [][]byte{[]byte("x")}} {
		for _, format := range []int16{pgtype.TextFormatCode, pgtype.BinaryFormatCode} {
			want, wantErr := pgxMap.Encode(pgtype.ByteaArrayOID, format, v, nil)
			got, gotErr := ours.Encode(pgtype.ByteaArrayOID, format, v, nil)
			require.Equal(t, wantErr == nil, gotErr == nil, "%T format %d", v, format)
			require.Equal(t, want, got, "%T format %d", v, format)
		}
	}
}
