// Consume-transform-produce with kafka-clients: a group member reads IN, and per poll a
// transaction writes the upper-cased values to OUT and commits the consumer's offsets
// with sendOffsetsToTransaction(offsets, consumer.groupMetadata()) (generation and member
// id checked, KIP-447). Prints the producer epoch before and after, the group's committed
// offset and what read_committed sees in OUT.
// Usage: TxnCtpScenario BOOTSTRAP IN OUT COUNT
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnCtpScenario {
    static KafkaConsumer<String, String> consumer(String bootstrap, String group, String level) {
        Properties p = Check.props(bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, level);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return new KafkaConsumer<>(p);
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], in = args[1], out = args[2];
        int count = Integer.parseInt(args[3]);
        Properties pp = Check.props(bootstrap);
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> plain = new KafkaProducer<>(pp)) {
            for (int i = 0; i < count; i++) {
                plain.send(new ProducerRecord<>(in, 0, "k", "v" + i));
            }
        }
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "ctp-tx");
        int transactions = 0;
        try (KafkaProducer<String, String> p = new KafkaProducer<>(pp);
             KafkaConsumer<String, String> c = consumer(bootstrap, "ctp-group", "read_committed")) {
            p.initTransactions();
            int e0 = TxnScenario.epoch(bootstrap, "ctp-tx");
            c.subscribe(List.of(in));
            int done = 0;
            long deadline = System.currentTimeMillis() + 60000;
            while (done < count && System.currentTimeMillis() < deadline) {
                ConsumerRecords<String, String> records = c.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                p.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (ConsumerRecord<String, String> r : records) {
                    p.send(new ProducerRecord<>(out, 0, r.key(), r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    done++;
                }
                p.sendOffsetsToTransaction(offsets, c.groupMetadata());
                p.commitTransaction();
                transactions++;
            }
            Check.that(done == count, "transformed " + done + " of " + count);
            Check.out("epoch bumps " + (TxnScenario.epoch(bootstrap, "ctp-tx") - e0 == transactions));
        }
        try (Admin admin = Admin.create(Check.props(bootstrap))) {
            Check.out("committed " + admin.listConsumerGroupOffsets("ctp-group").partitionsToOffsetAndMetadata()
                    .get().get(new TopicPartition(in, 0)).offset());
        }
        List<String> seen = new ArrayList<>();
        try (KafkaConsumer<String, String> r = consumer(bootstrap, null, "read_committed")) {
            TopicPartition tp = new TopicPartition(out, 0);
            r.assign(List.of(tp));
            r.seekToBeginning(List.of(tp));
            long deadline = System.currentTimeMillis() + 15000;
            while (seen.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> rec : r.poll(Duration.ofMillis(200))) {
                    seen.add(rec.value());
                }
            }
        }
        Check.out("out " + String.join(",", seen));
        Check.out("OK ctp");
    }
}
