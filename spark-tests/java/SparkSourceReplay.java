// Replays, call for call, what Spark 4's Kafka source and sink do against a broker
// (org.apache.spark.sql.kafka010: KafkaOffsetReaderAdmin on the driver, KafkaDataConsumer
// on executors, KafkaWriteTask with a cached producer), with kafka-clients 4.3.0:
//
// sink, per batch      an idempotent KafkaProducer (ByteArraySerializer, the client's
//                      defaults: acks=all, enable.idempotence=true), keyed records with
//                      explicit timestamps, flushed at the end of the task;
// driver, per batch    Admin.describeTopics for partition discovery, Admin.listOffsets
//                      with OffsetSpec.earliest() (startingOffsets=earliest, first batch)
//                      and OffsetSpec.latest() (endingOffsets / latestOffset), with the
//                      isolation level of the source options; the latest offset of a
//                      partition is never reported lower than before;
// executor, per range  one KafkaConsumer per partition with group.id
//                      "spark-kafka-source-<uuid>-executor", auto.offset.reset=none,
//                      enable.auto.commit=false, ByteArrayDeserializer: assign, seek(from),
//                      poll until `until` (exclusive), checking dense offsets; the
//                      available range is checked with seekToBeginning/seekToEnd/position;
// by timestamp         startingOffsetsByTimestamp: Admin.listOffsets(forTimestamp) per
//                      partition, reading from there;
// data loss            after Admin.deleteRecords, the earliest offset moves up and a
//                      consumer with auto.offset.reset=none that seeks below it gets
//                      OffsetOutOfRangeException (what failOnDataLoss relies on).
//
// Usage: SparkSourceReplay BOOTSTRAP TOPIC PARTITIONS BATCHES RECORDS_PER_BATCH TS_BASE ISOLATION
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class SparkSourceReplay {
    static final String GROUP_PREFIX = "spark-kafka-source-" + UUID.randomUUID();

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int batches = Integer.parseInt(args[3]);
        int perBatch = Integer.parseInt(args[4]);
        long tsBase = Long.parseLong(args[5]);
        IsolationLevel isolation = IsolationLevel.valueOf(args[6].toUpperCase());
        ListOffsetsOptions options = new ListOffsetsOptions(isolation);

        try (Admin admin = Admin.create(Check.props(bootstrap));
             KafkaProducer<byte[], byte[]> producer = sinkProducer(bootstrap)) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
            List<TopicPartition> tps = discover(admin, topic);
            Check.that(tps.size() == partitions, "discovered " + tps);

            Map<TopicPartition, Long> from = offsets(admin, tps, OffsetSpec.earliest(), options);
            for (long o : from.values()) {
                Check.that(o == 0, "earliest of a new topic " + from);
            }
            Map<TopicPartition, Long> lastLatest = new HashMap<>(from);
            Map<String, Long> produced = new HashMap<>();  // value -> timestamp
            Set<String> read = new HashSet<>();
            int seq = 0;
            for (int b = 0; b < batches; b++) {
                // Sink task of this batch.
                List<Future<RecordMetadata>> acks = new ArrayList<>();
                for (int i = 0; i < perBatch; i++, seq++) {
                    String value = "batch-" + b + "-rec-" + seq;
                    long ts = tsBase + seq;
                    produced.put(value, ts);
                    acks.add(producer.send(new ProducerRecord<>(topic, null, ts,
                            ("key-" + seq).getBytes(StandardCharsets.UTF_8),
                            value.getBytes(StandardCharsets.UTF_8))));
                }
                producer.flush();
                for (Future<RecordMetadata> f : acks) {
                    f.get();
                }
                // Driver: latestOffset of the micro-batch, never lower than before.
                Map<TopicPartition, Long> until = offsets(admin, discover(admin, topic), OffsetSpec.latest(), options);
                for (TopicPartition tp : tps) {
                    Check.that(until.get(tp) >= lastLatest.get(tp),
                            tp + " latest went back: " + until.get(tp) + " < " + lastLatest.get(tp));
                }
                lastLatest = until;
                // Executors: one consumer per partition for [from, until).
                int batchRead = 0;
                for (TopicPartition tp : tps) {
                    for (ConsumerRecord<byte[], byte[]> r : readRange(bootstrap, tp, from.get(tp), until.get(tp), isolation)) {
                        String v = new String(r.value(), StandardCharsets.UTF_8);
                        Check.that(read.add(v), "read twice: " + v);
                        Check.that(produced.containsKey(v), "never produced: " + v);
                        Check.that(r.timestamp() == produced.get(v), "timestamp of " + v);
                        batchRead++;
                    }
                }
                Check.that(batchRead == perBatch, "batch " + b + " read " + batchRead + " of " + perBatch);
                Check.out("batch " + b + " read " + batchRead + " until " + until.values());
                from = until;
            }
            Check.that(read.equals(produced.keySet()), "read " + read.size() + " of " + produced.size());

            // startingOffsetsByTimestamp: from the first record at or after the timestamp.
            long ts = tsBase + (long) seq / 2;
            Map<TopicPartition, Long> byTs = offsets(admin, tps, OffsetSpec.forTimestamp(ts), options);
            int fromTs = 0;
            for (TopicPartition tp : tps) {
                long start = byTs.get(tp);
                if (start < 0) {
                    continue;  // nothing at or after ts in this partition
                }
                List<ConsumerRecord<byte[], byte[]>> rest = readRange(bootstrap, tp, start, lastLatest.get(tp), isolation);
                Check.that(!rest.isEmpty() && rest.get(0).timestamp() >= ts, tp + " first record before ts");
                if (start > 0) {
                    ConsumerRecord<byte[], byte[]> before = readRange(bootstrap, tp, start - 1, start, isolation).get(0);
                    Check.that(before.timestamp() < ts, tp + " a record before the offset has ts >= " + ts);
                }
                fromTs += rest.size();
            }
            long expected = produced.values().stream().filter(t -> t >= ts).count();
            Check.that(fromTs == expected, "by timestamp read " + fromTs + " of " + expected);
            Check.out("by timestamp read " + fromTs);

            TopicPartition tp0 = tps.get(0);
            long cut = lastLatest.get(tp0) / 2;
            Check.that(cut > 0, "partition 0 has too few records for the data-loss check");
            admin.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(cut))).all().get();
            Map<TopicPartition, Long> earliestNow = offsets(admin, List.of(tp0), OffsetSpec.earliest(), options);
            Check.that(earliestNow.get(tp0) == cut, "earliest after deleteRecords " + earliestNow);
            try (KafkaConsumer<byte[], byte[]> consumer = executorConsumer(bootstrap, isolation)) {
                consumer.assign(List.of(tp0));
                consumer.seek(tp0, 0);
                long deadline = System.currentTimeMillis() + 30_000;
                boolean detected = false;
                while (!detected && System.currentTimeMillis() < deadline) {
                    try {
                        Check.that(consumer.poll(Duration.ofMillis(500)).isEmpty(), "read deleted records");
                    } catch (OffsetOutOfRangeException e) {
                        detected = true;
                    }
                }
                Check.that(detected, "no OffsetOutOfRangeException below the earliest offset");
                Check.out("data loss detected below " + cut);
            }
            Check.that(readRange(bootstrap, tp0, cut, lastLatest.get(tp0), isolation).size()
                    == lastLatest.get(tp0) - cut, "records after the cut");
        }
        Check.out("OK spark replay");
    }

    static KafkaProducer<byte[], byte[]> sinkProducer(String bootstrap) {
        Properties p = Check.props(bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static List<TopicPartition> discover(Admin admin, String topic) throws Exception {
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        List<TopicPartition> out = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            out.add(new TopicPartition(topic, p.partition()));
        }
        return out;
    }

    static Map<TopicPartition, Long> offsets(Admin admin, List<TopicPartition> tps, OffsetSpec spec,
                                             ListOffsetsOptions options) throws Exception {
        Map<TopicPartition, OffsetSpec> specs = new HashMap<>();
        for (TopicPartition tp : tps) {
            specs.put(tp, spec);
        }
        Map<TopicPartition, Long> out = new HashMap<>();
        for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> e
                : admin.listOffsets(specs, options).all().get().entrySet()) {
            out.put(e.getKey(), e.getValue().offset());
        }
        return out;
    }

    static KafkaConsumer<byte[], byte[]> executorConsumer(String bootstrap, IsolationLevel isolation) {
        Properties p = Check.props(bootstrap);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, GROUP_PREFIX + "-executor");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation.toString());
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return new KafkaConsumer<>(p);
    }

    static List<ConsumerRecord<byte[], byte[]>> readRange(String bootstrap, TopicPartition tp, long from,
                                                          long until, IsolationLevel isolation) {
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = executorConsumer(bootstrap, isolation)) {
            consumer.assign(List.of(tp));
            // KafkaDataConsumer.getAvailableOffsetRange
            consumer.seekToBeginning(List.of(tp));
            long earliest = consumer.position(tp);
            consumer.seekToEnd(List.of(tp));
            long latest = consumer.position(tp);
            Check.that(earliest <= from && until <= latest,
                    tp + " [" + from + ", " + until + ") outside available [" + earliest + ", " + latest + ")");
            consumer.seek(tp, from);
            long next = from;
            long deadline = System.currentTimeMillis() + 30_000;
            while (next < until && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(500)).records(tp)) {
                    if (r.offset() >= until) {
                        break;
                    }
                    Check.that(r.offset() == next, tp + " offset " + r.offset() + ", expected " + next);
                    out.add(r);
                    next++;
                }
            }
            Check.that(next == until, tp + " stopped at " + next + " of " + until);
        }
        return out;
    }
}
