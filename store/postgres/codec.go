package postgres

import (
	"context"
	"encoding/binary"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// byteaArrays is the connection's codec for bytea[], the type of every set
// of keys and values the store sends (a commit's writes, a Prefetch's
// keys). A [][]byte in the binary format is encoded here in one pass into
// a buffer grown once to its size; pgx's generic array codec encodes it
// element by element through reflection, growing the buffer as it goes —
// a profile of the lifecycle showed that growth at a sixth of the bytes
// the client allocates. Every other value, and decoding, is pgx's own.
type byteaArrays struct{ pgtype.Codec }

// registerByteaArrays installs byteaArrays on a new connection
// (pgxpool.Config.AfterConnect).
func registerByteaArrays(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	if t, ok := m.TypeForOID(pgtype.ByteaArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: byteaArrays{t.Codec}})
	}
	return nil
}

func (c byteaArrays) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([][]byte); ok && format == pgtype.BinaryFormatCode {
		return byteaArrayPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// byteaArrayPlan writes a [][]byte as PostgreSQL's binary array: the
// number of dimensions, whether an element is NULL, the element type, and
// per dimension its length and lower bound (1); then each element as its
// length (-1 for NULL) and its bytes. A nil slice is NULL, an empty one
// one dimension of length 0, as pgx's codec encodes them.
type byteaArrayPlan struct{}

func (byteaArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.([][]byte)
	if a == nil {
		return nil, nil
	}
	size, null := 20, uint32(0)
	for _, e := range a {
		size += 4 + len(e)
		if e == nil {
			null = 1
		}
	}
	buf = slices.Grow(buf, size)
	buf = binary.BigEndian.AppendUint32(buf, 1)
	buf = binary.BigEndian.AppendUint32(buf, null)
	buf = binary.BigEndian.AppendUint32(buf, pgtype.ByteaOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(a)))
	buf = binary.BigEndian.AppendUint32(buf, 1)
	for _, e := range a {
		if e == nil {
			buf = binary.BigEndian.AppendUint32(buf, 0xffffffff)
			continue
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(e)))
		buf = append(buf, e...)
	}
	return buf, nil
}
